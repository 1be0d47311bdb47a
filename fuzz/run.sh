#!/usr/bin/env bash
# Runs the fuzz targets for a bounded time each and fails if any finds a crash.
#
#   fuzz/run.sh [seconds-per-target] [target...]
#
# Seconds default to 60; targets default to all of them. Needs the nightly
# toolchain and cargo-fuzz (`cargo install cargo-fuzz --locked`). Each run's
# libFuzzer output is kept in fuzz/logs/<target>.log, a crashing input in
# fuzz/artifacts/<target>/, and the grown corpus in fuzz/corpus/<target>/.
# CARGO_FUZZ_ARGS adds options to `cargo fuzz build` and `cargo fuzz run`,
# e.g. CARGO_FUZZ_ARGS=--dev for an unoptimised build that compiles faster.
set -euo pipefail
cd "$(dirname "$0")"

seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(kinesis_event kinesis_record kpl_deaggregate ddb_stream_image ddb_sdk_image
             state_item kcl_item positions_file sequence_number)
fi

# The largest input worth trying for each target: above the largest seed,
# small enough to keep the runs fast.
max_len() {
    case "$1" in
        kinesis_event | ddb_stream_image | ddb_sdk_image | state_item | kcl_item | positions_file) echo 8192 ;;
        kpl_deaggregate | kinesis_record) echo 4096 ;;
        sequence_number) echo 512 ;;
        *) echo "unknown target $1" >&2; exit 2 ;;
    esac
}

read -r -a cargo_fuzz_args <<<"${CARGO_FUZZ_ARGS:-}"

./seed-corpus.sh >/dev/null
mkdir -p logs
(cd .. && cargo +nightly fuzz build "${cargo_fuzz_args[@]}")

failed=()
for target in "${targets[@]}"; do
    args=(
        "-max_total_time=$seconds"
        "-max_len=$(max_len "$target")"
        -rss_limit_mb=2048
        -malloc_limit_mb=512
        -timeout=10
        -print_final_stats=1
    )
    dict="$target"
    case "$target" in
        ddb_sdk_image) dict=ddb_stream_image ;;
    esac
    if [ -f "dict/$dict.dict" ]; then
        args+=("-dict=fuzz/dict/$dict.dict")
    fi
    echo "== $target: ${seconds}s"
    if (cd .. && cargo +nightly fuzz run "${cargo_fuzz_args[@]}" "$target" -- "${args[@]}") >"logs/$target.log" 2>&1; then
        status=ok
    else
        status=FAILED
        failed+=("$target")
        grep -E 'panicked|ERROR: |SUMMARY: ' "logs/$target.log" | head -5 || true
    fi
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "logs/$target.log" | tail -1 || true)
    echo "$target: $status ${done_line:-(no DONE line, see fuzz/logs/$target.log)}"
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "crashes found by: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "no crash in ${#targets[@]} target(s), ${seconds}s each"
