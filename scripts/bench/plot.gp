# Clustered bar chart of speedups (contender / baseline, log scale) for one bench section; called by report.py.
# Variables from the command line: datafile, outfile, plottitle, ncols (case column + one per comparison).
set terminal pngcairo size 1100,560 noenhanced font "sans,10"
set output outfile
set title plottitle
set datafile separator "\t"
set datafile missing "?"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
# Bars grow from parity: up = the contender is faster, down = slower; the axis is log2 of the speedup.
set ylabel "speedup (contender vs baseline)"
set ytics ("1/64x" -6, "1/32x" -5, "1/16x" -4, "1/8x" -3, "1/4x" -2, "1/2x" -1, "1x" 0, "2x" 1, "4x" 2, "8x" 3, "16x" 4, "32x" 5, "64x" 6)
set yrange [*:*]
set offsets 0, 0, 0.3, 0.3
set grid ytics
set xtics rotate by -25 left
set key outside right top
set xzeroaxis lt -1 lw 2
plot for [i=2:ncols] datafile using (log(column(i)) / log(2)):xtic(1) title columnheader(i)
