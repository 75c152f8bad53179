# nccl_env.sh: sourced by the GPU scripts. Points DRAGON_NCCL_LIB at an
# NCCL for the data-parallel ranks unless it is set: the toolkit on the GPU
# machine has none, PyTorch ships one. Sets NCCL_NOTE to one line saying
# which. NVLink multicast stays off, as the machines ask.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -z "${DRAGON_NCCL_LIB:-}" ]; then
  lib=$(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
  [ -f "$lib" ] || lib=$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)
  [ -n "$lib" ] && export DRAGON_NCCL_LIB="$lib"
fi
NCCL_NOTE="NCCL: ${DRAGON_NCCL_LIB:-not found (the two-GPU runs will fail)}"
