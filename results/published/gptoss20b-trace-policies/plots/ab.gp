set terminal pngcairo size 1000,600 noenhanced
set output './ab.png'
set title 'gptoss20b-trace-policies: decode_hit_rate ratio treatment/control, median with 95% bootstrap CI'
set ylabel 'ratio B/A'
set xrange [-0.5:1.5]
set grid ytics
set xtics rotate by 20 right
set key top left
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead lc rgb 'gray'
set arrow 2 from graph 0, first 1.050000 to graph 1, first 1.050000 nohead dt 2 lc rgb 'red'
set label 2 'hypothesis threshold 1.050' at graph 0.99, first 1.050000 right offset 0,0.7 tc rgb 'red'
plot 'ab.dat' using 1:2:3:4:xtic(5) with yerrorbars pt 7 ps 1.5 lw 2 title 'ratio [CI]'
set terminal svg size 1000,600 noenhanced
set output './ab.svg'
replot
