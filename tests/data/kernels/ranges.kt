kernel tiles(A: f32[64, 64], B: f32[64, 64]):
  block root:
    for io, jo in grid(16, 16):
      block tile(vio: S(16) = io, vjo: S(16) = jo):
        reads A[vio * 4:vio * 4 + 4, 0:64]
        writes B[vio * 4:vio * 4 + 4, vjo * 4:vjo * 4 + 4]
        alloc T: f32[4, 4] local
        for ii, jj in grid(4, 4):
          block inner(vi: S(4) = ii, vj: S(4) = jj):
            reads A[vio * 4 + vi, vjo * 4 + vj]
            writes T[vi, vj]
            T[vi, vj] = A[vio * 4 + vi, vjo * 4 + vj] * 2.0
        for ii_1, jj_1 in grid(4, 4):
          block out(vi_1: S(4) = ii_1, vj_1: S(4) = jj_1):
            reads T[vi_1, vj_1]
            writes B[vio * 4 + vi_1, vjo * 4 + vj_1]
            B[vio * 4 + vi_1, vjo * 4 + vj_1] = T[vi_1, vj_1]
