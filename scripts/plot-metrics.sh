#!/usr/bin/env bash
# Turns a fanstore-train metrics.jsonl into PNG curves (gnuplot): loss.png, metric.png,
# throughput.png and stall.png next to each other in an output directory. A tournament run
# (--trainers K) gets one loss and metric curve per trainer, with a point where a trainer took
# another's model.
# Usage: scripts/plot-metrics.sh METRICS.jsonl [OUTDIR]   (OUTDIR defaults to the metrics file's folder)
# Needs gnuplot (Debian: gnuplot-nox) and python3 (FANSTORE_PYTHON, default /usr/bin/python3).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || $1 == -h || $1 == --help ]]; then
  echo "usage: $0 METRICS.jsonl [OUTDIR]  (writes loss.png metric.png throughput.png stall.png)" >&2
  exit 2
fi
metrics=$1
out=${2:-$(dirname "$metrics")}
python=${FANSTORE_PYTHON:-/usr/bin/python3}
[[ -r $metrics ]] || { echo "plot-metrics: cannot read $metrics" >&2; exit 1; }
command -v gnuplot > /dev/null || { echo "plot-metrics: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/plot-metrics.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# JSON lines -> whitespace-separated columns gnuplot reads. A resumed run appends to the same file,
# so steps can repeat; the last record of a step wins. NaN is null in the file and "NaN" here.
"$python" - "$metrics" "$tmp" << 'EOF'
import json, sys
steps, vals, metric = {}, {}, None
losses, tvals, exchanges = {}, {}, {}  # tournament runs: per trainer
with open(sys.argv[1]) as f:
    for n, line in enumerate(f, 1):
        line = line.strip()
        if not line:
            continue
        try:
            e = json.loads(line)
        except ValueError:
            sys.exit(f"plot-metrics: {sys.argv[1]}:{n}: not a JSON line")
        num = lambda k: "NaN" if e.get(k) is None else repr(float(e[k]))
        t = e.get("trainer")
        if e.get("event") == "step":
            if t is not None:
                losses.setdefault(t, {})[e["step"]] = num("loss")
            if t in (None, 0):  # a step's timing is the same record for every trainer
                steps[e["step"]] = (num("loss"), num("samples_per_s"), num("compute_samples_per_s"), num("input_stall_pct"), num("lr"))
        elif e.get("event") == "validation":
            metric = next((k for k in e if k not in ("event", "epoch", "step", "baseline_mae", "trainer")), metric)
            (tvals.setdefault(t, {}) if t is not None else vals)[e["step"]] = (e["epoch"] + 1, num(metric) if metric else "NaN")
        elif e.get("event") == "tournament" and e.get("kept") == "partner":
            exchanges[(e["step"], t)] = True
        elif e.get("event") == "summary" and e.get("metric"):
            metric = e["metric"]
if not steps:
    sys.exit(f"plot-metrics: {sys.argv[1]} has no step records (is it a fanstore-train metrics file?)")
with open(f"{sys.argv[2]}/steps.dat", "w") as out:
    for s in sorted(steps):
        out.write(f"{s} {' '.join(steps[s])}\n")
with open(f"{sys.argv[2]}/validation.dat", "w") as out:
    for s in sorted(vals):
        out.write(f"{s} {vals[s][0]} {vals[s][1]}\n")
for t in losses:
    with open(f"{sys.argv[2]}/loss_{t}.dat", "w") as out:
        for s in sorted(losses[t]):
            out.write(f"{s} {losses[t][s]}\n")
    with open(f"{sys.argv[2]}/validation_{t}.dat", "w") as out:
        for s in sorted(tvals.get(t, {})):
            out.write(f"{s} {tvals[t][s][0]} {tvals[t][s][1]}\n")
with open(f"{sys.argv[2]}/exchanges.dat", "w") as out:  # the taker's loss at the step of the round
    for (s, t) in sorted(exchanges):
        out.write(f"{s} {losses.get(t, {}).get(s, 'NaN')}\n")
with open(f"{sys.argv[2]}/trainers", "w") as out:
    out.write(f"{len(losses)}\n")
with open(f"{sys.argv[2]}/metric_name", "w") as out:
    out.write(metric or "validation metric")
# Which step columns have any value (files of older fanstore-train versions lack the stall fields).
with open(f"{sys.argv[2]}/columns", "w") as out:
    out.write(" ".join("1" if any(v[i] != "NaN" for v in steps.values()) else "0" for i in range(5)) + "\n")
EOF
read -r has_loss has_rate has_compute has_stall has_lr < "$tmp/columns"

metric_name=$(cat "$tmp/metric_name")
trainers=$(cat "$tmp/trainers")
has_validation=0
[[ -s $tmp/validation.dat || -s $tmp/validation_0.dat ]] && has_validation=1
has_exchanges=0
[[ -s $tmp/exchanges.dat ]] && has_exchanges=1
gnuplot << EOF
set terminal pngcairo size 900,500 font ",10"
set grid
set key top right
set xlabel "step"
set datafile missing "NaN"

set output "$out/loss.png"
set ylabel "loss"
if ($trainers > 0) {
  set title "Training loss per trainer (mean over its ranks); points: a trainer took the winner's model"
  if ($has_exchanges) {
    plot for [t=0:$trainers-1] sprintf("$tmp/loss_%d.dat", t) using 1:2 with lines lw 1 title sprintf("trainer %d", t), \
         "$tmp/exchanges.dat" using 1:2 with points pt 7 ps 1 lc rgb "black" title "took the winner's model"
  } else {
    plot for [t=0:$trainers-1] sprintf("$tmp/loss_%d.dat", t) using 1:2 with lines lw 1 title sprintf("trainer %d", t)
  }
} else {
  set title "Training loss (mean over ranks)"
  plot "$tmp/steps.dat" using 1:2 with lines lw 1 title "loss"
}

set output "$out/throughput.png"
set title "Training throughput"
set ylabel "samples/s"
if ($has_compute) {
  plot "$tmp/steps.dat" using 1:3 with lines lw 1 title "samples/s (including the wait for data)", \
       "$tmp/steps.dat" using 1:4 with lines lw 1 title "samples/s without the wait"
} else {
  plot "$tmp/steps.dat" using 1:3 with lines lw 1 title "samples/s"
}

set output "$out/stall.png"
set title "Input stall: share of step time waiting for the loader"
set ylabel "% of step time"
if ($has_stall) {
  set yrange [0:100]
  plot "$tmp/steps.dat" using 1:5 with lines lw 1 title "input stall %"
  set autoscale y
} else {
  set label 2 "no input_stall_pct in this file (written by an older fanstore-train)" at graph 0.5, 0.5 center
  plot [0:1] [0:1] NaN notitle
  unset label 2
}

set output "$out/metric.png"
set title "Validation $metric_name"
set ylabel "$metric_name"
if ($has_validation && $trainers > 0) {
  plot for [t=0:$trainers-1] sprintf("$tmp/validation_%d.dat", t) using 1:3 with linespoints lw 2 pt 7 \
       title sprintf("trainer %d (after each epoch)", t)
} else {
  if ($has_validation) {
    plot "$tmp/validation.dat" using 1:3 with linespoints lw 2 pt 7 title "$metric_name (after each epoch)"
  } else {
    set label 1 "no validation records (train with --val DIR)" at graph 0.5, 0.5 center
    plot [0:1] [0:1] NaN notitle
  }
}
EOF
echo "plot-metrics: wrote $out/loss.png $out/metric.png $out/throughput.png $out/stall.png"
