# A pipeline stage as dvc.yaml runs it: `sh scripts/stage.sh STAGE` is `soarlab stage STAGE`, with the
# soarlab installed beside the Python that runs DVC, so that `.venv/bin/dvc repro` works without an
# activated environment (DVC hands its stages no path of its own interpreter, and `.venv/bin` is then
# not on PATH). DVC's interpreter is the first word of its command line (a console script's shebang
# names it): found among this shell's ancestors in /proc. Where there is no /proc, or no ancestor has
# soarlab beside it, the soarlab on PATH.
pid=$$
while [ "${pid:-0}" -gt 1 ] && [ -r "/proc/$pid/cmdline" ]; do
    interpreter=$(tr '\0' '\n' < "/proc/$pid/cmdline" | head -n 1)
    case $interpreter in
        */*) [ -x "${interpreter%/*}/soarlab" ] && exec "${interpreter%/*}/soarlab" stage "$@" ;;
    esac
    ppid=
    while read -r key value; do
        [ "$key" = "PPid:" ] && ppid=$value && break
    done < "/proc/$pid/status"
    pid=$ppid
done
exec soarlab stage "$@"
