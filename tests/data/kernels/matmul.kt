kernel main(X: f32[1, 128, 128], Y: f32[1, 128, 128], Z: f32[1, 128, 128]):
  block root:
    for b, i, j, k in grid(1, 128, 128, 128):
      block Z(vb: S(1) = b, vi: S(128) = i, vj: S(128) = j, vk: R(128) = k):
        reads X[vb, vi, vk], Y[vb, vk, vj]
        writes Z[vb, vi, vj]
        init:
          Z[vb, vi, vj] = 0.0
        Z[vb, vi, vj] = Z[vb, vi, vj] + X[vb, vi, vk] * Y[vb, vk, vj]
