set terminal pngcairo size 1000,600 noenhanced
set output './cliff.png'
set title 'k3-twin-cliff-wired: decode speed and hit rate vs RAM budget'
set xlabel 'RAM budget (GiB, log scale)'
set logscale x
set ylabel 'decode tok/s (median, min-max bars)'
set y2label 'decode demand hit rate (%)'
set y2range [0:100]
set ytics nomirror
set y2tics
set key outside bottom center horizontal
set grid
set yrange [0:*]
set xrange [*:12.000000]
set arrow 1 from 8.000000, graph 0 to 8.000000, graph 1 nohead dt 2 lc rgb 'red'
set label 1 'machine profile RAM 8 GiB' at 8.000000, graph 0.95 right offset -0.5,0 tc rgb 'red'
plot 'cliff.dat' index 0 using 1:2:3:4 with yerrorlines lw 2 title 'base wired=1280M tok/s', 'cliff.dat' index 0 using 1:5 axes x1y2 with linespoints dt 2 title 'base wired=1280M decode hit %', 'cliff.dat' index 1 using 1:2:3:4 with yerrorlines lw 2 title 'base wired=1536M tok/s', 'cliff.dat' index 1 using 1:5 axes x1y2 with linespoints dt 2 title 'base wired=1536M decode hit %', 'cliff.dat' index 2 using 1:2:3:4 with yerrorlines lw 2 title 'base wired=2G tok/s', 'cliff.dat' index 2 using 1:5 axes x1y2 with linespoints dt 2 title 'base wired=2G decode hit %', 'cliff.dat' index 3 using 1:2:3:4 with yerrorlines lw 2 title 'base wired=2304M tok/s', 'cliff.dat' index 3 using 1:5 axes x1y2 with linespoints dt 2 title 'base wired=2304M decode hit %'
set terminal svg size 1000,600 noenhanced
set output './cliff.svg'
replot
