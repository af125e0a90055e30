set terminal pngcairo size 1000,600 noenhanced
set output './ab.png'
set title 'vs-llama-cpp-bench-fits: tg_tok_per_s_cold ratio treatment/control, median with 95% bootstrap CI'
set ylabel 'ratio B/A'
set xrange [-0.5:1.5]
set grid ytics
set xtics rotate by 20 right
set key top left
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead lc rgb 'gray'
plot 'ab.dat' using 1:2:3:4:xtic(5) with yerrorbars pt 7 ps 1.5 lw 2 title 'ratio [CI]', 'ab.dat' using 1:6 with points pt 2 ps 2 lc rgb 'red' title 'cell threshold'
set terminal svg size 1000,600 noenhanced
set output './ab.svg'
replot
