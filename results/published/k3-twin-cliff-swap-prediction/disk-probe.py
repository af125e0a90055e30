# O_DIRECT random-record read bandwidth on the twin container: T threads, R-byte reads at 4 KiB-aligned offsets
import os, mmap, random, threading, time, sys, glob
paths = sorted(glob.glob(sys.argv[1] + "/experts-*.bin")); path = sys.argv[1]
R = int(sys.argv[2]); T = int(sys.argv[3]); S = float(sys.argv[4])
size = os.path.getsize(paths[0]); done = [0]*T; stop = time.time() + S
def w(i):
    fds = [os.open(p, os.O_RDONLY | os.O_DIRECT) for p in paths]; buf = mmap.mmap(-1, R); rnd = random.Random(i)
    while time.time() < stop:
        off = rnd.randrange(0, (size - R) // 4096) * 4096
        done[i] += os.preadv(rnd.choice(fds), [buf], off)
    [os.close(f) for f in fds]
t0 = time.time(); th = [threading.Thread(target=w, args=(i,)) for i in range(T)]
[t.start() for t in th]; [t.join() for t in th]
dt = time.time() - t0
print(f"{path}: {T} threads x {R} B reads: {sum(done)/dt/1e9:.3f} GB/s over {dt:.1f} s")
