set terminal pngcairo size 1000,600 noenhanced
set output './cliff.png'
set title 'k3-released-twin-cliff-swap: decode speed and hit rate vs RAM budget'
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
set arrow 2 from 5.858407, graph 0 to 5.858407, graph 1 nohead dt 3 lc rgb 'dark-green'
set label 2 'default budget 5.86 GiB' at 5.858407, graph 0.88 left offset 0.5,0 tc rgb 'dark-green'
plot 'cliff.dat' index 0 using 1:2:3:4 with yerrorlines lw 2 title 'base tok/s', 'cliff.dat' index 0 using 1:5 axes x1y2 with linespoints dt 2 title 'base decode hit %'
set terminal svg size 1000,600 noenhanced
set output './cliff.svg'
replot
