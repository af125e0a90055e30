set terminal pngcairo size 1000,600 noenhanced
set output './cliff-io.png'
set title 'vs-llama-cpp-bench: bytes read and major page faults vs emulated RAM'
set xlabel 'emulated machine RAM (GiB, log scale)'
set logscale x
set ylabel 'GiB read per token (median of runs)'
set y2label 'major page faults per token (median of runs)'
set ytics nomirror
set y2tics
set key outside bottom center horizontal
set grid
set yrange [0:*]
set y2range [0:*]
plot 'cliff.dat' index 0 using 1:6 with linespoints lw 2 title 'spill GiB read/token', 'cliff.dat' index 0 using 1:7 axes x1y2 with linespoints dt 2 title 'spill major faults/token'
set terminal svg size 1000,600 noenhanced
set output './cliff-io.svg'
replot
