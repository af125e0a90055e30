# Measures the cost of a swap-in fault on this machine: a process in a memory
# cgroup of LIMIT with swap, touching SIZE of anonymous memory, then reading
# its pages back in random order (each read of a swapped-out page is a major
# fault, with the kernel's swap readahead of vm.page-cluster).
import mmap, os, random, resource, sys, time
LIMIT = 256 << 20; SIZE = 1024 << 20; PAGE = 4096
home = "/sys/fs/cgroup/memory" + [l.split(":")[2].strip() for l in open("/proc/self/cgroup") if ":memory:" in l][0]
cg = home + "/swapcost-%d" % os.getpid()
os.mkdir(cg)
try:
    open(cg + "/memory.limit_in_bytes", "w").write(str(LIMIT))
    open(cg + "/memory.memsw.limit_in_bytes", "w").write(str(LIMIT + (4 << 30)))
    open(cg + "/cgroup.procs", "w").write(str(os.getpid()))
    m = mmap.mmap(-1, SIZE)
    for i in range(0, SIZE, PAGE): m[i] = 1
    pages = list(range(0, SIZE, PAGE)); random.seed(1)
    for order in ("random", "sequential"):
        if order == "random": random.shuffle(pages)
        else: pages.sort()
        # push everything out again: touch the other half... simply re-touch all
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_majflt; t0 = time.perf_counter()
        s = 0
        for i in pages: s += m[i]
        dt = time.perf_counter() - t0; f = resource.getrusage(resource.RUSAGE_SELF).ru_majflt - f0
        print(f"{order}: {len(pages)} pages read, {f} major faults, {dt:.2f} s, {dt/max(f,1)*1e6:.0f} us/fault, {SIZE/dt/1e6:.0f} MB/s")
    open(home + "/cgroup.procs", "w").write(str(os.getpid()))
finally:
    m = None
    os.rmdir(cg)
