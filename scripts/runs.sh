# Sourced by the figure drivers (is_figure.sh, fmnist_figure.sh); needs PY (the python to run).

# optimizer name -> its label in legends and tables
declare -A LABEL=([adam3]=Adam3 [oadagrad]=OAdagrad [dadam3]=Dadam3 [cadam3]=Cadam3 [dosg]=DOSG [cosg]=COSG)

# train_or_resume DIR [hydra overrides...]: a finished run is skipped, one with a checkpoint is
# resumed, anything else starts afresh (overwrite=true: without a checkpoint there is nothing
# to continue, only the log of a run killed before its first checkpoint).
train_or_resume() {
  local dir=$1
  shift
  if tail -n 1 "$dir/metrics.jsonl" 2>/dev/null | grep -q '"status": "finished"'; then   # the last record decides
    echo "$dir: finished, skipped"
  elif [ -f "$dir/checkpoints/last.pt" ]; then
    nice "$PY" -m dadam3.train "$@" "resume=$dir" hydra.run.dir="$dir"
  else
    nice "$PY" -m dadam3.train "$@" overwrite=true hydra.run.dir="$dir"
  fi
}
