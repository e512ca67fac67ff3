#!/bin/sh
# Entrypoint of the mnistbench images (docs/docker.md).
#
#   docker run IMAGE                      run the study: snakemake --cores all
#   docker run IMAGE ARGS...              snakemake --cores all ARGS... (e.g. --configfile
#                                         config/quick.yaml, --dry-run, a target file)
#   docker run IMAGE mnistbench ARGS...   the mnistbench CLI (what the workflow's docker runner
#                                         uses for one cell: mnistbench train ...)
#   docker run IMAGE snakemake|python|python3|bash|sh ARGS...   that program as is
#
# Who runs it: started as root (the default), it reads the owner of /work/results (the mounted
# results folder) and runs everything as that uid:gid through setpriv, with no capabilities,
# so the files belong to whoever owns the folder on the host. Only when root owns the folder
# does it stay root (and says so). Started with --user UID:GID, it runs as that user unchanged.
# The command runs under tini (see the end), so signals reach it and exit codes come back.
#
# Environment it sets when unset:
#   MNISTBENCH_ENV  the environment name, "<host>-docker-<image>" as mnistbench.core.study names
#                   it; <host> is the container's host name (docker run --hostname "$(hostname)")
#                   or "container" when Docker left its random container id there.
#   HOME            a writable folder when the user's HOME is not writable.
set -eu

results=/work/results
me=mnistbench-entrypoint

if [ "$(id -u)" = 0 ]; then
  if [ ! -d "$results" ]; then
    echo "$me: error: $results is missing; mount the results folder there" \
      "(-v \"\$PWD/results:$results\")." >&2
    exit 1
  fi
  uid=$(stat -c %u "$results")
  gid=$(stat -c %g "$results")
  if [ "$uid" != 0 ]; then
    # Runs this script again as that user (no capabilities, none to gain), which skips this.
    exec setpriv --reuid="$uid" --regid="$gid" --clear-groups --inh-caps=-all \
      --bounding-set=-all --no-new-privs -- "$0" "$@"
  fi
  echo "$me: note: root owns $results, so the study runs as root and its files belong to" \
    "root; create the folder as yourself before docker run (mkdir -p results) or pass" \
    "--user \"\$(id -u):\$(id -g)\" to run unprivileged." >&2
fi

# A writable HOME for caches (matplotlib, torch): the uid may have no home in the image.
if [ -z "${HOME:-}" ] || [ ! -w "${HOME}" ]; then
  HOME="/tmp/mnistbench-home-$(id -u)"
  mkdir -p "$HOME"
  export HOME
fi
# getpass.getuser() (torch's compile cache) needs a name even for a uid without a passwd entry.
if [ -z "${USER:-}" ]; then
  USER=$(id -un 2>/dev/null || echo "uid$(id -u)")
  export USER
fi

# The environment name: the package's one rule (mnistbench.core.study.environment_name, which maps
# the 12-hex-digit host name Docker makes up to "container"), unless MNISTBENCH_ENV is set.
if [ -z "${MNISTBENCH_ENV:-}" ]; then
  MNISTBENCH_ENV=$(mnistbench env-name)
  export MNISTBENCH_ENV
fi

# tini (-s: also when Docker's --init runs as PID 1) passes SIGTERM/SIGINT to the command's
# whole process group (-g) and reaps orphans: `docker stop` and Ctrl-C end a study or a cell
# at once, which a Python process as PID 1 would ignore. The command's exit code is kept
# (mnistbench train: 10 unavailable, 11 oom, 12 failed).
case "${1:-}" in
  mnistbench | snakemake | python | python3 | bash | sh)
    exec tini -s -g -- "$@"
    ;;
  *)
    exec tini -s -g -- snakemake --cores all "$@"
    ;;
esac
