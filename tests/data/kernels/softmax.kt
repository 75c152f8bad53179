kernel softmax(A: f32[4, 64], B: f32[4, 64]):
  block root:
    alloc M: f32[4]
    alloc E: f32[4, 64]
    alloc S: f32[4]
    for i, k in grid(4, 64):
      block maxelem(vi: S(4) = i, vk: R(64) = k):
        reads A[vi, vk]
        writes M[vi]
        init:
          M[vi] = -inf
        M[vi] = max(M[vi], A[vi, vk])
    for i_1, j in grid(4, 64):
      block exp(vi_1: S(4) = i_1, vj: S(64) = j):
        reads A[vi_1, vj], M[vi_1]
        writes E[vi_1, vj]
        E[vi_1, vj] = exp(A[vi_1, vj] - M[vi_1])
    for i_2, k_1 in grid(4, 64):
      block expsum(vi_2: S(4) = i_2, vk_1: R(64) = k_1):
        reads E[vi_2, vk_1]
        writes S[vi_2]
        init:
          S[vi_2] = 0.0
        S[vi_2] = S[vi_2] + E[vi_2, vk_1]
    for i_3, j_1 in grid(4, 64):
      block norm(vi_3: S(4) = i_3, vj_1: S(64) = j_1):
        reads E[vi_3, vj_1], S[vi_3]
        writes B[vi_3, vj_1]
        B[vi_3, vj_1] = E[vi_3, vj_1] / S[vi_3]
