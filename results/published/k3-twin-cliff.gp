set xlabel "RAM budget (GiB) on an emulated 8 GiB machine"
set ylabel "decode tok/s"
set y2label "major faults per decode token"
set ytics nomirror
set y2tics
set key top right
set grid
set title "K3 twin (8 GiB): engine (median, min-max) vs sim"
plot "results/published/k3-twin-cliff.dat" using 1:2:3:4 with yerrorlines lw 2 pt 7 title "tok/s engine", \
     "" using 1:5 with linespoints dt 2 pt 6 title "tok/s sim", \
     "" using 1:8 axes x1y2 with linespoints pt 4 title "major faults/token (engine)"
