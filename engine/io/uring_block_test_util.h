/* engine/io/uring_block_test_util.h (tests only): refuses io_uring in the
 * calling process, as a container runtime's default seccomp profile does,
 * so a test can take the path a machine without io_uring takes. Call it in
 * a forked child: the filter is inherited and cannot be removed. Used by
 * engine/io's reader_test (the reader's refusal) and engine's
 * spill_engine_test (io_backend auto falling back to the pread pool).
 */
#ifndef SPILL_IO_URING_BLOCK_TEST_UTIL_H
#define SPILL_IO_URING_BLOCK_TEST_UTIL_H

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

/* Installs a seccomp filter that makes io_uring_setup fail with EPERM (x86-64
 * only). Returns 1 when installed, 0 when the kernel refused the filter or
 * the architecture is another. */
static inline int spill_test_block_io_uring_setup(void) {
#if defined(__x86_64__)
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 0;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
#else
  return 0;
#endif
}

#endif
