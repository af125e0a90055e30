set terminal pngcairo size 1000,600 noenhanced
set output './timeline-off.png'
set title 'lookahead-ab: per-token time, off (-, repeat 0)'
set style data histograms
set style histogram rowstacked
set style fill solid 0.8 border -1
set boxwidth 0.8
set xlabel 'decoded token'
set ylabel 'ms'
set y2label 'experts'
set ytics nomirror
set y2tics
set key outside bottom center horizontal
set xtics 8
set xrange [-1:*]
plot './timeline-off.dat' using 2 title 'compute (wall - I/O wait)' lc rgb '#4477aa', '' using 3 title 'I/O wait' lc rgb '#cc6677', '' using 0:4 axes x1y2 with lines lw 2 lc rgb '#228833' title 'hits', '' using 0:5 axes x1y2 with lines lw 2 lc rgb '#aa3377' title 'misses'
set terminal svg size 1000,600 noenhanced
set output './timeline-off.svg'
replot
