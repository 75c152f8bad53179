kernel k(A: f32[4]):
  block root:
    A[0] = ((((1.0))))
