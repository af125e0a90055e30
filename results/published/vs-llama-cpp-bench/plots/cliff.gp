set terminal pngcairo size 1000,600 noenhanced
set output './cliff.png'
set title 'vs-llama-cpp-bench: decode speed and hit rate vs emulated RAM'
set xlabel 'emulated machine RAM (GiB, log scale)'
set logscale x
set ylabel 'tg_tok_per_s_cold (median, min-max bars)'
set y2label 'decode_hit_rate_cold (%)'
set y2range [0:100]
set ytics nomirror
set y2tics
set key outside bottom center horizontal
set grid
set yrange [0:*]
set arrow 1 from 16.771080, graph 0 to 16.771080, graph 1 nohead dt 2 lc rgb 'red'
set label 1 'model 16.8 GiB' at 16.771080, graph 0.95 right offset -0.5,0 tc rgb 'red'
plot 'cliff.dat' index 0 using 1:2:3:4 with yerrorlines lw 2 title 'spill tok/s', 'cliff.dat' index 0 using 1:5 axes x1y2 with linespoints dt 2 title 'spill decode hit %', 'cliff.dat' index 1 using 1:2:3:4 with yerrorlines lw 2 title 'llama.cpp-mmap tok/s'
set terminal svg size 1000,600 noenhanced
set output './cliff.svg'
replot
