kernel main(I: f32[1, 16, 14, 14], W: f32[32, 16, 3, 3], O: f32[1, 32, 14, 14]):
  block root:
    alloc P: f32[1, 16, 16, 16]
    for n, c, h, w in grid(1, 16, 16, 16):
      block pad(vn: S(1) = n, vc: S(16) = c, vh: S(16) = h, vw: S(16) = w):
        reads I[vn, vc, vh - 1, vw - 1]
        writes P[vn, vc, vh, vw]
        P[vn, vc, vh, vw] = select(1 <= vh && vh < 15 && 1 <= vw && vw < 15, I[vn, vc, vh - 1, vw - 1], 0.0)
    for n_1, f, y, x, rc, ry, rx in grid(1, 32, 14, 14, 16, 3, 3):
      block conv(vn_1: S(1) = n_1, vf: S(32) = f, vy: S(14) = y, vx: S(14) = x, vrc: R(16) = rc, vry: R(3) = ry, vrx: R(3) = rx):
        reads P[vn_1, vrc, vy + vry, vx + vrx], W[vf, vrc, vry, vrx]
        writes O[vn_1, vf, vy, vx]
        init:
          O[vn_1, vf, vy, vx] = 0.0
        O[vn_1, vf, vy, vx] = O[vn_1, vf, vy, vx] + P[vn_1, vrc, vy + vry, vx + vrx] * W[vf, vrc, vry, vrx]
