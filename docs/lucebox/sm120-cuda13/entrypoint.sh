#!/bin/sh
# Rendered by lucepatch 0.1.0 for lucebox 1.0.0 (sm120-cuda13).
# Fetch the target GGUF and the draft repository from Hugging Face when absent, then exec the server.
#   HF_ENDPOINT  mirror or hub (default https://huggingface.co)
#   HF_TOKEN     read here at run time only (gated draft repos); never logged, never on a command line
#   MODEL_DIR TARGET_REPO TARGET_FILE DRAFT_REPO HF_REVISION SERVER_BIN PORT   (see the image's ENV)
#   SKIP_DOWNLOAD=1  use what is in MODEL_DIR as is;  DOWNLOAD_ONLY=1  fetch, then exit 0 (an init
#                    container, so the download is outside the server's health start period)
#   DRAFT_FILE       a draft file inside MODEL_DIR/draft to use instead of the search below
#   STALL_SECONDS    abort a download that moves < 1 KiB/s for this long (default 120); the .part
#                    file is kept and the next start resumes it (curl -C -)
#   PROGRESS_SECONDS how often download progress is logged (default 30)
#   DOWNLOAD_RETRIES retries within one start after a dropped connection (curl 18, 56, 52, 7, ...) or a
#                    stall (curl 28), each resuming from the bytes the .part file holds then (default 3)
#   DOWNLOAD_RETRY_DELAY seconds between those retries (default 5)
# The draft passed to the server is a file, found in MODEL_DIR/draft as upstream's scripts
# (server/scripts/run.py resolve_draft) do: the first of dflash-draft-*.gguf, then *.gguf, then
# model.safetensors, searched recursively, in sorted path order.
# Exit codes: 2 bad configuration, 3 access denied / not found, 4 disk full, 5 integrity (size,
# sha256, GGUF magic), 6 network (also a stalled download: run again to resume).
set -eu
HF_ENDPOINT="${HF_ENDPOINT:-https://huggingface.co}"; HF_ENDPOINT="${HF_ENDPOINT%/}"
REV="${HF_REVISION:-main}"
MODEL_DIR="${MODEL_DIR:-/models}"
SERVER_BIN="${SERVER_BIN:-/app/bin/dflash_server}"
PORT="${PORT:-8080}"

say() { echo "entrypoint: $*" >&2; }
die() { code=$1; shift; say "error: $*"; exit "$code"; }

# curl with the token passed through a config on stdin: not visible in ps or /proc/*/cmdline
hf_curl() {
  if [ -n "${HF_TOKEN:-}" ]; then
    printf 'header = "Authorization: Bearer %s"\n' "$HF_TOKEN" | curl -K - "$@"
  else
    curl "$@"
  fi
}

# HEAD the resolve URL: status, size (X-Linked-Size or Content-Length), sha256 (X-Linked-Etag)
head_meta() { # repo file -> sets META_STATUS META_SIZE META_SHA
  hdrs=$(hf_curl -sS -I --max-time 60 "$HF_ENDPOINT/$1/resolve/$REV/$2" 2>/dev/null) || die 6 "cannot reach $HF_ENDPOINT for $1/$2"
  META_STATUS=$(printf '%s\n' "$hdrs" | awk 'toupper($1) ~ /^HTTP\// {s=$2} END {print s}')
  META_SIZE=$(printf '%s\n' "$hdrs" | tr -d '\r' | awk -F': ' 'tolower($1)=="x-linked-size"{print $2}' | tail -n1)
  [ -n "$META_SIZE" ] || META_SIZE=$(printf '%s\n' "$hdrs" | tr -d '\r' | awk -F': ' 'tolower($1)=="content-length"{print $2}' | tail -n1)
  META_SHA=$(printf '%s\n' "$hdrs" | tr -d '\r' | awk -F': ' 'tolower($1)=="x-linked-etag"{print $2}' | tr -d '"W/' | tail -n1)
  case "$META_SHA" in *[!0-9a-f]*|"") META_SHA="" ;; esac
  [ "$(printf %s "$META_SHA" | wc -c)" -eq 64 ] || META_SHA=""
}

denied() { # status repo
  case "$1" in
    401|403) die 3 "HTTP $1 for $2: the repository is gated or private. Accept its terms on the hub and pass a token at run time (docker run -e HF_TOKEN=...); it is never baked into the image" ;;
    404) die 3 "HTTP 404 for $2 at $HF_ENDPOINT (revision $REV): check the repository and file names" ;;
  esac
}

check_magic() { # path kind [file to remove when it is not GGUF]
  [ "$2" = gguf ] || return 0
  magic=$(head -c 4 "$1" | tr -c 'A-Za-z0-9' '?')
  if [ "$magic" != "GGUF" ]; then
    hint=""
    # safetensors: 8-byte little-endian header length, then '{'
    if [ "$(head -c 9 "$1" | tail -c 1)" = "{" ]; then hint=" - this is a safetensors file, not GGUF (the server would fail with invalid magic characters '$magic')"; fi
    [ -z "${3:-}" ] || rm -f "$3"
    die 5 "invalid magic '$magic' in $1: expected 'GGUF'$hint; point TARGET_FILE at a .gguf file"
  fi
}

size_of() { wc -c <"$1" 2>/dev/null | tr -d ' ' || echo 0; }

# log bytes so far every PROGRESS_SECONDS while curl runs (container logs have no progress bar).
# No background sleep: a `sleep N & sp=$!` killed from the trap leaves its sleep behind whenever the TERM
# lands between the fork and the assignment (seen in CI). One-second sleeps in the foreground end on their
# own; TERM only sets a flag that the loop reads after each one, so the caller's `wait` returns within 1 s.
progress() { # file total pid
  stop=""; trap 'stop=1' TERM
  n=0
  while [ -z "$stop" ] && kill -0 "$3" 2>/dev/null; do
    sleep 1
    n=$((n + 1))
    [ "$n" -ge "${PROGRESS_SECONDS:-30}" ] || continue
    n=0
    [ -z "$stop" ] && kill -0 "$3" 2>/dev/null || break
    have=$(size_of "$1")
    if [ -n "$2" ] && [ "$2" -gt 0 ]; then say "progress: $(basename "$1" .part) $have/$2 bytes ($((have * 100 / $2))%)"
    else say "progress: $(basename "$1" .part) $have bytes"; fi
  done
}

fetch() { # repo file dest kind
  repo=$1; file=$2; dest=$3; kind=$4
  if [ -s "$dest" ]; then check_magic "$dest" "$kind"; say "present: $dest"; return 0; fi
  head_meta "$repo" "$file"
  denied "$META_STATUS" "$repo/$file"
  case "$META_STATUS" in 2??|30?) ;; *) die 6 "HTTP ${META_STATUS:-?} for $repo/$file" ;; esac
  dir=$(dirname "$dest"); mkdir -p "$dir" || die 2 "cannot create $dir (is the volume writable by uid $(id -u)?)"
  # a stable .part name: an interrupted download (stall, restart, OOM kill) resumes from it
  part="$dest.part"
  have=0; [ -f "$part" ] && have=$(size_of "$part")
  if [ -n "$META_SIZE" ]; then
    avail=$(df -Pk "$dir" | awk 'NR==2 {print $4}')
    if [ -n "$avail" ] && [ $(((META_SIZE - have) / 1024 + 1)) -gt "$avail" ]; then
      die 4 "disk full: $repo/$file needs $META_SIZE bytes ($have already in $part), $dir has $((avail * 1024)) free"
    fi
  fi
  if [ -n "$META_SIZE" ] && [ "$have" = "$META_SIZE" ]; then
    say "complete: $part ($have bytes), verifying"
  else
    if [ "$have" -gt 0 ]; then say "resuming $repo/$file at byte $have of ${META_SIZE:-?}"
    else say "downloading $repo/$file (${META_SIZE:-?} bytes) to $dest"; fi
    # One curl per attempt, each with -C - so it asks for the bytes after what $part holds *now*:
    # curl's own --retry neither retries a dropped connection (18) nor moves its resume offset.
    tries=$((${DOWNLOAD_RETRIES:-3} + 1)); attempt=1
    while :; do
      set +e
      hf_curl -fsSL -C - --speed-limit 1024 --speed-time "${STALL_SECONDS:-120}" -o "$part" \
        "$HF_ENDPOINT/$repo/resolve/$REV/$file" 2>"$part.err" &
      cpid=$!
      progress "$part" "$META_SIZE" "$cpid" &
      ppid=$!
      wait "$cpid"; rc=$?
      kill "$ppid" 2>/dev/null; wait "$ppid" 2>/dev/null
      set -e
      case "$rc" in
        # partial file, stall, empty reply, recv/send error, connect failed, TLS, HTTP/2 stream
        18|28|52|55|56|7|35|16|92) ;;
        *) break ;;
      esac
      [ "$attempt" -lt "$tries" ] || break
      say "download of $repo/$file interrupted (curl $rc) at $(size_of "$part") bytes; retry $attempt/$((tries - 1)) resumes there"
      attempt=$((attempt + 1))
      sleep "${DOWNLOAD_RETRY_DELAY:-5}"
    done
    if [ $rc -ne 0 ]; then
      err=$(tail -n 1 "$part.err" 2>/dev/null); rm -f "$part.err"
      case "$rc" in
        23) die 4 "disk full while writing $part ($err); free space and start again to resume" ;;
        28) die 6 "download of $repo/$file stalled (< 1 KiB/s for ${STALL_SECONDS:-120}s) at $(size_of "$part") bytes; start again to resume from $part" ;;
        33) rm -f "$part"; die 6 "$HF_ENDPOINT does not resume downloads (no byte ranges); start again to download $repo/$file from the beginning" ;;
        22) case "$err" in *401*|*403*) denied 403 "$repo/$file" ;; *416*) rm -f "$part"; die 6 "the hub refused to resume $part ($err): removed it, start again" ;; esac
            die 6 "download of $repo/$file failed: $err (kept $part to resume)" ;;
        *) die 6 "download of $repo/$file failed (curl $rc): $err (kept $part to resume)" ;;
      esac
    fi
    rm -f "$part.err"
  fi
  got=$(size_of "$part")
  if [ -n "$META_SIZE" ] && [ "$got" != "$META_SIZE" ]; then rm -f "$part"; die 5 "size mismatch for $repo/$file: got $got bytes, the hub says $META_SIZE"; fi
  if [ -n "$META_SHA" ]; then
    sum=$(sha256sum "$part" | cut -d' ' -f1)
    [ "$sum" = "$META_SHA" ] || { rm -f "$part"; die 5 "checksum mismatch for $repo/$file: sha256 $sum, the hub says $META_SHA"; }
  fi
  check_magic "$part" "$kind" "$part"
  mv -f "$part" "$dest"
}

# the draft file inside a folder, as upstream's resolve_draft: patterns in order, recursive,
# sorted by path components (Python sorts Path objects part by part: '/' sorts first)
resolve_draft() { # dir
  if [ -n "${DRAFT_FILE:-}" ]; then
    f="$1/$DRAFT_FILE"; [ -f "$f" ] || die 2 "DRAFT_FILE=$DRAFT_FILE is not a file in $1"; echo "$f"; return 0
  fi
  [ -f "$1" ] && { echo "$1"; return 0; }
  for pat in 'dflash-draft-*.gguf' '*.gguf' 'model.safetensors'; do
    f=$(find "$1" -type f -name "$pat" 2>/dev/null | tr '/' '\001' | LC_ALL=C sort | tr '\001' '/' | head -n 1)
    [ -n "$f" ] && { echo "$f"; return 0; }
  done
  return 1
}

if [ "${SKIP_DOWNLOAD:-0}" != 1 ]; then
  [ -n "${TARGET_REPO:-}" ] && [ -n "${TARGET_FILE:-}" ] || die 2 "TARGET_REPO and TARGET_FILE must be set"
  fetch "$TARGET_REPO" "$TARGET_FILE" "$MODEL_DIR/target/$TARGET_FILE" gguf
  marker="$MODEL_DIR/draft/.lucepatch-complete"
  if [ -n "${DRAFT_REPO:-}" ] && [ "$(cat "$marker" 2>/dev/null)" = "$DRAFT_REPO@$REV" ]; then
    say "present: $MODEL_DIR/draft ($DRAFT_REPO@$REV)"
  elif [ -n "${DRAFT_REPO:-}" ]; then
    # the whole draft repository (config.json beside model.safetensors)
    listing=$(hf_curl -sS --max-time 60 -w '\n%{http_code}' "$HF_ENDPOINT/api/models/$DRAFT_REPO/revision/$REV") || die 6 "cannot list $DRAFT_REPO"
    status=$(printf '%s' "$listing" | tail -n 1)
    denied "$status" "$DRAFT_REPO"
    files=$(printf '%s' "$listing" | sed '$d' | grep -o '"rfilename" *: *"[^"]*"' | sed 's/.*: *"\(.*\)"/\1/')
    [ -n "$files" ] || die 6 "no files listed for $DRAFT_REPO (HTTP $status)"
    for f in $files; do
      case "$f" in .gitattributes|README.md) continue ;; esac
      fetch "$DRAFT_REPO" "$f" "$MODEL_DIR/draft/$f" raw
    done
    printf '%s\n' "$DRAFT_REPO@$REV" >"$marker"
  fi
fi
if [ "${DOWNLOAD_ONLY:-0}" = 1 ]; then say "download complete: $MODEL_DIR"; exit 0; fi
target_path="$MODEL_DIR/target/${TARGET_FILE:-}"
[ -f "$target_path" ] || die 2 "no target model at $target_path (set TARGET_FILE, or unset SKIP_DOWNLOAD)"
draft=""
if [ -d "$MODEL_DIR/draft" ] || [ -n "${DRAFT_REPO:-}" ]; then
  draft=$(resolve_draft "$MODEL_DIR/draft") || die 2 "no DFlash draft under $MODEL_DIR/draft: expected dflash-draft-*.gguf, *.gguf or model.safetensors (check DRAFT_REPO, or set DRAFT_FILE)"
  say "draft: $draft"
fi
say "starting $SERVER_BIN on 0.0.0.0:$PORT"
exec "$SERVER_BIN" "$target_path" ${draft:+--draft "$draft"} --host 0.0.0.0 --port "$PORT" "$@"
