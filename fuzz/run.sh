#!/bin/sh
# make fuzz: builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz and runs each
# for FUZZ_SECONDS (default 60) from seed corpora made from ../shared/data when it is there (and
# from small built-in seeds otherwise). Findings (crash-*, leak-*, timeout-*, oom-*) are kept in
# build-fuzz/findings/<target>/; the script exits non-zero if there is any. Findings fixed since are
# kept in fuzz/regressions/<target>/ and replayed before each target's run.
#   fuzz/run.sh [SECONDS]        (FUZZ_TARGETS="fuzz_hdf5 ..." runs only those; FUZZ_RUNS=N also
#                                 ends a target after N executions: the 10-million campaign)
#   fuzz/run.sh --build TARGET...  configures build-fuzz and builds TARGETs only (make test-asan:
#                                 bertcc_tests, so that the library's sanitized objects are shared)
# build-fuzz is one clang tree for make fuzz and make test-asan: ASan + UBSan and the fuzzers'
# coverage instrumentation, which unit tests linked without libFuzzer leave unused (make test-asan
# makes UBSan's reports fatal at run time, UBSAN_OPTIONS=halt_on_error=1, as -fno-sanitize-recover
# does in a BERTCC_SANITIZE build; the fuzzers keep UBSan's reports recoverable).
set -eu
HERE="$(cd "$(dirname "$0")/.." && pwd)"
B="$HERE/build-fuzz"; S="$HERE/../shared/data"
command -v clang++ > /dev/null || { echo "fuzz: clang++ not found (Debian: clang, libclang-rt-14-dev)"; exit 1; }
mkdir -p "$B"
CC=clang CXX=clang++ cmake -S "$HERE" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBERTCC_FUZZ=ON -DBERTCC_SANITIZE=OFF \
  -DBERTCC_MPI=OFF -DBERTCC_CUDA=OFF > "$B/configure.log" 2>&1 || { tail -20 "$B/configure.log"; exit 1; }
if [ "${1:-}" = --build ]; then
  shift
  cmake --build "$B" -j "$(nproc)" --target "$@"
  exit $?
fi
SECONDS_EACH="${1:-${FUZZ_SECONDS:-60}}"
cmake --build "$B" -j "$(nproc)" --target fuzz_tokenizer fuzz_vocab fuzz_safetensors fuzz_config fuzz_datasets fuzz_text fuzz_torch fuzz_kserve fuzz_hdf5 fuzz_http fuzz_framing > "$B/build.log" 2>&1 \
  || { grep -E "error" "$B/build.log" | head -20; exit 1; }
seeds() {  # seeds TARGET: fills $B/corpus/TARGET
  d="$B/corpus/$1"; mkdir -p "$d"
  case $1 in
    fuzz_tokenizer)
      printf 'Hello worlds! [SEP] caf\303\251 \344\275\240\345\245\275 un##affable' > "$d/small"
      [ -f "$S/squad/v1.1/dev-v1.1.json" ] && head -c 3000 "$S/squad/v1.1/dev-v1.1.json" > "$d/squad" ;;
    fuzz_vocab)
      printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n##s\nworld\n\0Hello worlds! [SEP] caf\303\251 \344\275\240\345\245\275' > "$d/small"
      [ -f "$S/bert_vocab/bert-base-uncased-vocab.txt" ] && { head -3000 "$S/bert_vocab/bert-base-uncased-vocab.txt"; printf '\0'; head -c 2000 "$S/squad/v1.1/dev-v1.1.json"; } > "$d/bert" ;;
    fuzz_safetensors)
      /usr/bin/python3 - "$d" <<'PYEOF'
import json, struct, sys
def write(p, header, data):
    h = json.dumps(header).encode(); h += b" " * ((8 - len(h) % 8) % 8)
    open(p, "wb").write(struct.pack("<Q", len(h)) + h + data)
write(sys.argv[1] + "/two", {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [8, 16]}, "__metadata__": {"format": "pt"}}, bytes(16))
write(sys.argv[1] + "/f16", {"a": {"dtype": "F16", "shape": [3], "data_offsets": [0, 6]}}, bytes(6))
PYEOF
      ;;
    fuzz_config)
      printf '{"vocab_size": 100, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 16, "type_vocab_size": 2, "hidden_act": "gelu", "id2label": {"0": "a", "1": "b"}}' > "$d/hf"
      printf '{"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02}' > "$d/google" ;;
    fuzz_datasets)
      i=0
      for task in SST-2 MRPC STS-B; do
        [ -f "$S/glue/$task/dev.tsv" ] && { printf "\\$(printf '%03o' $i)"; head -30 "$S/glue/$task/dev.tsv"; } > "$d/glue_$task"
        i=$((i + 1))
      done
      [ -f "$S/squad/v1.1/dev-v1.1.json" ] && { printf '\005'; /usr/bin/python3 -c "
import json; d = json.load(open('$S/squad/v1.1/dev-v1.1.json')); a = d['data'][0]; a['paragraphs'] = a['paragraphs'][:2]
print(json.dumps({'version': '1.1', 'data': [a]}))"; } > "$d/squad"
      [ -f "$S/conll2003/iob2/train.txt" ] && { printf '\007'; head -60 "$S/conll2003/iob2/train.txt"; } > "$d/conll"
      printf '\000sentence\tlabel\nit is good\t1\n' > "$d/tiny" ;;
    fuzz_text)
      printf "'''Anarchism''' is a [[political philosophy|philosophy]] {{cite|x}} &amp; more.<ref>r</ref> Mr. Smith went to Washington. He said \"hi.\" Then left!\n\n== Section ==\n* item" > "$d/wiki"
      [ -f "$S/glue/SST-2/dev.tsv" ] && head -c 3000 "$S/glue/SST-2/dev.tsv" > "$d/text" ;;
    fuzz_kserve)  # Triton requests: JSON (flat and nested data) and the binary extension
      printf '\377\377{"id": "a", "inputs": [{"name": "input_ids", "shape": [2, 3], "datatype": "INT64", "data": [[101, 7, 102], [101, 8, 102]]}, {"name": "attention_mask", "shape": [2, 3], "datatype": "INT32", "data": [1, 1, 1, 1, 1, 0]}, {"name": "token_type_ids", "shape": [2, 3], "datatype": "INT64", "data": [0, 0, 0, 0, 1, 1]}], "outputs": [{"name": "logits"}]}' > "$d/json"
      /usr/bin/python3 - "$d" <<'PYEOF'
import json, struct, sys
h = json.dumps({"inputs": [{"name": "input_ids", "shape": [1, 4], "datatype": "INT32", "parameters": {"binary_data_size": 16}}]}).encode()
body = h + struct.pack("<4i", 101, 5, 6, 102)
open(sys.argv[1] + "/binary", "wb").write(struct.pack("<H", len(h)) + body)
PYEOF
      ;;
    fuzz_hdf5)  # a masked (NVIDIA) and a dynamic-masking shard of 3 rows x 16 tokens
      /usr/bin/python3 - "$d" <<'PYEOF' 2>/dev/null || true
import sys, h5py, numpy as np
ids = np.array([[2, 10, 11, 3, 12, 13, 3] + [0] * 9] * 3, dtype=np.int32)
mask = (ids != 0).astype(np.int8); seg = np.array([[0] * 4 + [1] * 3 + [0] * 9] * 3, dtype=np.int8)
with h5py.File(sys.argv[1] + "/masked.h5", "w") as f:
    f["input_ids"] = ids; f["input_mask"] = mask; f["segment_ids"] = seg
    f["masked_lm_positions"] = np.array([[1, 5, 0]] * 3, dtype=np.int32)
    f["masked_lm_ids"] = np.array([[10, 13, 0]] * 3, dtype=np.int32)
    f["next_sentence_labels"] = np.array([0, 1, 0], dtype=np.int8)
with h5py.File(sys.argv[1] + "/dynamic.h5", "w") as f:
    f["input_ids"] = ids; f["input_mask"] = mask; f["segment_ids"] = seg
    f["next_sentence_labels"] = np.array([0, 1, 0], dtype=np.int8)
    f["lengths"] = np.array([7, 7, 7], dtype=np.int32)
PYEOF
      ;;
    fuzz_http)  # pipelined requests of every route and framing: Content-Length, chunked, 100-continue
      printf 'GET /health HTTP/1.1\r\nHost: x\r\n\r\nPOST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /m/x/ready HTTP/1.1\r\n\r\n' > "$d/pipelined"
      printf 'POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Type: a/b\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /m/%%C3%%A9/v/1/ready?q=1 HTTP/1.0\r\n\r\n' > "$d/chunked"
      printf 'POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabcHEAD /health HTTP/1.1\r\nConnection: close\r\n\r\n' > "$d/continue" ;;
    fuzz_framing)  # a limits/cuts byte, then one connection's bytes: chunked with extensions and trailers, pipelined
      printf '\000POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Type: a/b\r\n\r\n5;a=b;c="d e"\r\nhello\r\n0\r\nX-T: 1\r\n\r\nGET /m HTTP/1.0\r\nConnection: keep-alive\r\n\r\n' > "$d/chunked"
      printf '\005POST /echo HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhelloGET / HTTP/1.1\r\nHost: x\r\n\r\n' > "$d/length"
      printf '\012POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\nX-Fold: a\r\n b\r\n\r\n0\r\n\r\n' > "$d/refused" ;;
    fuzz_torch)  # small torch.save files: a state dict (one transposed view) and NVIDIA's wrapping
      /usr/bin/python3 - "$d" <<'PYEOF' 2>/dev/null || true
import collections, sys, torch
sd = collections.OrderedDict(a=torch.arange(6.0).reshape(2, 3), b=torch.ones(3, 2).t(), c=torch.zeros(2, dtype=torch.float16))
torch.save(sd, sys.argv[1] + "/state_dict")
torch.save({"model": sd, "epoch": 1, "files": ["x"], "optimizer": {"state": {}, "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99)}]}},
           sys.argv[1] + "/nvidia")
PYEOF
      ;;
  esac
}
[ -f "$S/bert_vocab/bert-base-uncased-vocab.txt" ] && export BERTCC_FUZZ_VOCAB="$S/bert_vocab/bert-base-uncased-vocab.txt"
status=0
# libhdf5 is fuzzed through bertcc's readers: its own free-list blocks lost on malformed files are
# not bertcc's (fuzz/lsan.supp), and its malloc of a corrupt header's absurd size behaves as glibc's
# does outside ASan: reserved but untouched memory (no malloc limit below 1 TiB; the RSS limit
# still counts what is touched), or null, so HDF5 reports the error. bertcc's C++ allocations
# still abort on failure.
export LSAN_OPTIONS="suppressions=$HERE/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
for t in ${FUZZ_TARGETS:-fuzz_tokenizer fuzz_vocab fuzz_safetensors fuzz_config fuzz_datasets fuzz_text fuzz_torch fuzz_kserve fuzz_hdf5 fuzz_http fuzz_framing}; do
  seeds "$t"
  mkdir -p "$B/findings/$t"
  asan=""; lim=""; [ "$t" = fuzz_hdf5 ] && asan="allocator_may_return_null=1" && lim="-malloc_limit_mb=1048576"
  # HTTP framing's tokens (Transfer-Encoding codings, chunk extensions, trailers, obs-fold)
  case $t in fuzz_framing|fuzz_http) lim="-dict=$HERE/fuzz/fuzz_framing.dict" ;; esac
  # earlier findings (fuzz/regressions/TARGET/) are replayed first: each must now run clean
  if [ -d "$HERE/fuzz/regressions/$t" ]; then
    # (fuzz_hdf5: the campaign's 60 s, below; its 8 GiB local-heap file takes over 20 s under ASan
    # on a loaded machine)
    tmo=20; [ "$t" = fuzz_hdf5 ] && tmo=60
    if ASAN_OPTIONS="${asan}${ASAN_OPTIONS:+:$ASAN_OPTIONS}" "$B/$t" -rss_limit_mb=4096 $lim -timeout=$tmo "$HERE/fuzz/regressions/$t"/* \
         > "$B/findings/$t.regressions.log" 2>&1; then
      echo "fuzz $t: $(ls "$HERE/fuzz/regressions/$t" | wc -l) earlier finding(s) replayed clean"
    else
      echo "fuzz $t: an earlier finding fails again: $(grep -m1 -E 'ERROR' "$B/findings/$t.regressions.log" || tail -1 "$B/findings/$t.regressions.log")"
      status=1
    fi
  fi
  # libhdf5 1.10 itself crashes on some malformed files, inside calls bertcc cannot check before
  # making (H5HL_protect -> H5F__accum_read copying into a failed allocation). The bertcc binary
  # reads shards in a child process (isolate_hdf5_reads in bertcc/pretrain_data.h), where such a
  # crash becomes an error naming the file (tests/bad_input.sh replays tests/data/libhdf5_crashes).
  # So this target fuzzes in fork mode and goes on after a crash; each crash is replayed and
  # triaged by its stack: the first frame past libc and ASan's interceptors inside libhdf5 is a
  # contained crash (kept in findings/fuzz_hdf5.libhdf5/), anywhere else a finding. The timeout is
  # 60 s: under ASan a corrupt header's huge (null-returning) allocation alone can take 30 s (the
  # release binary reads such a file in 0.14 s).
  if [ "$t" = fuzz_hdf5 ]; then
    C="$B/findings/$t.libhdf5"; mkdir -p "$C"
    kept=$(ls "$C" | grep -vc '\.stack$' || true)
    (cd "$B/findings/$t" && ASAN_OPTIONS="$asan" "$B/$t" -fork=1 -ignore_crashes=1 -ignore_ooms=0 -ignore_timeouts=0 -report_slow_units=60 \
       -max_total_time="$SECONDS_EACH" -max_len=65536 -rss_limit_mb=4096 $lim -timeout=60 "$B/corpus/$t" > "$B/findings/$t.log" 2>&1) || true
    for c in "$B/findings/$t"/crash-*; do
      [ -f "$c" ] || continue
      ASAN_OPTIONS="$asan" "$B/$t" -rss_limit_mb=4096 $lim "$c" > "$c.stack" 2>&1 || true
      top=$(grep -E '^ +#[0-9]+ ' "$c.stack" | grep -v -E '__interceptor_|libc\.so|sysdeps|compiler-rt|sanitizer' | head -1)
      case "$top" in *libhdf5*) mv "$c" "$c.stack" "$C/" ;; esac
    done
    runs=$(grep -o -E '^#[0-9]+' "$B/findings/$t.log" | tail -1 | tr -d '#')
    found=$(ls "$B/findings/$t" | grep -v '\.stack$' | wc -l)
    echo "fuzz $t: ${runs:-?} executions in ${SECONDS_EACH} s, $(( $(ls "$C" | grep -vc '\.stack$' || true) - kept )) new crash(es) inside libhdf5 (contained by bertcc's reader process, kept in $C), $found finding(s)$( [ "$found" -gt 0 ] && echo ": $(ls "$B/findings/$t" | head -3 | tr '\n' ' ')")"
    [ "$found" -eq 0 ] || status=1
    continue
  fi
  (cd "$B/findings/$t" && ASAN_OPTIONS="${asan}${ASAN_OPTIONS:+:$ASAN_OPTIONS}" "$B/$t" -max_total_time="$SECONDS_EACH" ${FUZZ_RUNS:+-runs=$FUZZ_RUNS} -max_len=65536 -rss_limit_mb=4096 $lim -timeout=20 \
     -print_final_stats=1 "$B/corpus/$t" > "$B/findings/$t.log" 2>&1) || status=1
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$B/findings/$t.log" | grep -o '[0-9]*$' || echo "?")
  found=$(ls "$B/findings/$t" | wc -l)
  echo "fuzz $t: $runs executions in $(t_s=$(sed -n 's/.*Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$B/findings/$t.log" | tail -1); echo "${t_s:-$SECONDS_EACH} s"), $found finding(s)$( [ "$found" -gt 0 ] && echo ": $(ls "$B/findings/$t" | head -3 | tr '\n' ' ')")"
  [ "$found" -eq 0 ] || status=1
done
exit $status
