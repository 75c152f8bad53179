kernel main(A: f16[1000, 1024], B: f16[1024, 1024], C: f32[1000, 1024]):
  block root:
    alloc A_shared: f16[1000, 1024] shared
    alloc C_local: f32[1000, 1024] local
    attr meta_schedule.tiling_structure = "SSRSRS"
    for i0_j0_fused in 256 bind(blockIdx.x):
      for i1_j1_fused in 64 bind(threadIdx.x) {meta_schedule.thread_extent_low_inclusive = 32, pragma_auto_unroll_max_step = 64, pragma_unroll_explicit = 1}:
        for k0 in 32 {software_pipeline_order = [0, 1, 2], software_pipeline_stage = [0, 0, 1]}:
          for ax0, ax1 in grid(64, 32):
            block A_shared(v0: S(1000) = i0_j0_fused // 16 * 64 + ax0, v1: S(1024) = k0 * 32 + ax1):
              reads A[v0, v1]
              writes A_shared[v0, v1]
              where i0_j0_fused // 16 * 64 + ax0 < 1000
              attr meta_schedule.cooperative_fetch = 4
              A_shared[v0, v1] = A[v0, v1]
          for k1, i3 in grid(32, 4):
            for j3 in 4 vectorized:
              block C(vi: S(1000) = i0_j0_fused // 16 * 64 + i1_j1_fused // 16 * 4 + i3, vj: S(1024) = i0_j0_fused % 16 * 64 + i1_j1_fused % 16 * 4 + j3, vk: R(1024) = k0 * 32 + k1):
                reads A_shared[vi, vk], B[vk, vj]
                writes C_local[vi, vj]
                where i0_j0_fused // 16 * 64 + i1_j1_fused // 16 * 4 + i3 < 1000
                init:
                  C_local[vi, vj] = 0.0
                C_local[vi, vj] = C_local[vi, vj] + f32(A_shared[vi, vk]) * f32(B[vk, vj])
        for ax0_1 in 4 unrolled:
          for ax1_1 in 4 parallel {x = 0.5, y = -2, z = "a \"quoted\" \\ string\n"}:
            block C_local(v0_1: S(1000) = i0_j0_fused // 16 * 64 + i1_j1_fused // 16 * 4 + ax0_1, v1_1: S(1024) = i0_j0_fused % 16 * 64 + i1_j1_fused % 16 * 4 + ax1_1):
              reads C_local[v0_1, v1_1]
              writes C[v0_1, v1_1]
              if v0_1 < 1000:
                C[v0_1, v1_1] = C_local[v0_1, v1_1]
              else:
                C[v0_1, v1_1] = -0.0
