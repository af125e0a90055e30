# Reproduction 1: simulated K3 cliff vs the published points.
# gnuplot results/published/k3-cliff-sim.gp (from the repo root)
set xlabel "RAM budget (GiB) on a 64 GiB machine"
set ylabel "decode tok/s"
set y2label "demand hit rate (%)"
set ytics nomirror
set y2tics
set yrange [0:0.8]
set y2range [0:60]
set xrange [28:62]
set key top left
set grid
set title "K3 RAM cliff: spill sim vs published (M5 Pro 64 GB)"
plot "results/published/k3-cliff-sim.dat" using 1:3 with linespoints lw 2 pt 7 title "tok/s, sim", \
     "" using 1:5:6:7 with yerrorbars pt 5 ps 1.5 title "tok/s, published", \
     "" using 1:2 axes x1y2 with linespoints dt 2 pt 6 title "hit %, sim", \
     "" using 1:4 axes x1y2 with points pt 4 ps 1.5 title "hit %, published"
