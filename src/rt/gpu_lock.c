/* gpu_lock.c: one measurement at a time on a GPU, across processes.
 *
 * Two kernels timed at once on one GPU slow each other down, and both
 * timings are wrong. Every GPU worker holds an exclusive lock on a file
 * named after its device's PCI address while it runs a job (load, check,
 * time), so that any number of dragon processes can share a GPU: one
 * labels while another compiles, and the timings stay those of a GPU
 * running one kernel. The lock is flock(2): the kernel releases it when a
 * worker dies, so a crashed or killed worker never leaves a GPU locked.
 *
 * The file lives in DRAGON_GPU_LOCK_DIR (default /tmp): "dragon-gpu-
 * 0000:1b:00.lock". Where the file cannot be opened the job runs
 * unlocked, as before.
 */
#include "rt/cuda_api.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
  ATTR_PCI_BUS_ID = 33,    /* CU_DEVICE_ATTRIBUTE_PCI_BUS_ID */
  ATTR_PCI_DEVICE_ID = 34, /* CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID */
  ATTR_PCI_DOMAIN_ID = 50, /* CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID */
};

int rt_gpu_lock_open(const rt_cu_api *cu, int dev) {
  int bus = 0, device = 0, domain = 0;
  if (cu->DeviceGetAttribute(&bus, ATTR_PCI_BUS_ID, dev) != 0 ||
      cu->DeviceGetAttribute(&device, ATTR_PCI_DEVICE_ID, dev) != 0 ||
      cu->DeviceGetAttribute(&domain, ATTR_PCI_DOMAIN_ID, dev) != 0)
    return -1;
  const char *dir = getenv("DRAGON_GPU_LOCK_DIR");
  char path[600];
  snprintf(path, sizeof path, "%s/dragon-gpu-%04x:%02x:%02x.lock", dir && *dir ? dir : "/tmp",
           (unsigned)domain, (unsigned)bus, (unsigned)device);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd >= 0) (void)fchmod(fd, 0666); /* shared by every user of the GPU */
  return fd;
}

int rt_gpu_lock_open_device(int dev) {
  dg_status st;
  const rt_cu_api *cu = rt_cu_api_load(&st);
  /* cuInit: a no-op where the process uses the GPU already */
  return cu && cu->Init(0) == 0 ? rt_gpu_lock_open(cu, dev) : -1;
}

void rt_gpu_lock(int fd) {
  if (fd < 0) return;
  while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
}

void rt_gpu_unlock(int fd) {
  if (fd >= 0) (void)flock(fd, LOCK_UN);
}
