#!/usr/bin/env bash
# lucepatch hami-core node swap: install a patched libvgpu.so on one node, safely.
#
#   hami-core-swap.sh install  --lib NEW --sha256 HEX --dir DIR [--name libvgpu.so] [--lock-timeout S]
#   hami-core-swap.sh rollback --dir DIR [--name libvgpu.so] [--lock-timeout S]
#   hami-core-swap.sh status   --dir DIR [--name libvgpu.so]
#
# Guarantees (each is tested on a real filesystem by tests/test_k8s_swap.py):
# - every refusal (bad checksum, non-ELF, missing exported symbols, shared-region version
#   mismatch, read-only directory, no installed library, missing backup) exits non-zero
#   BEFORE anything in DIR is created or changed;
# - one run at a time per directory: flock(2) on DIR itself (no lock file is created);
# - the installed library is backed up once, as NAME.backup-<sha256 of that library>;
# - the new library is written to a temp file in DIR, checked, then rename(2)d over NAME:
#   processes that mapped the old library keep the old inode; a kill before the rename
#   leaves NAME untouched (the stale temp file is removed by the next run);
# - a state file DIR/.lucepatch-state (KEY=VALUE lines) records what was done, including every
#   sha256 lucepatch ever installed there (lucepatch_installed=a,b,...);
# - installing the sha256 that is already installed is a no-op;
# - rollback restores only over the library lucepatch installed (state installed_sha256): a library
#   someone else put there since (a HAMi upgrade, a device-plugin restart) is never overwritten;
# - without the state file nothing is restored, and an install refuses when backups of an earlier
#   lucepatch install are there (the library in place may be lucepatch's own: it is no "original").
# Output: human lines on stderr, ONE result line on stdout:
#   @@lucepatch-swap {"action":...,"outcome":"installed|noop|rolled-back|refused|status",...}
# Exit: 0 done or no-op, 1 refused (node untouched), 2 usage, 3 tool missing.
# Test-only hook: LUCEPATCH_SWAP_TEST_PAUSE=P makes the run create P.reached after the temp
# file is written and wait (lock held) until P.go exists, then rename.
set -u
umask 022

ACTION="${1:-}"; [ $# -gt 0 ] && shift
LIB=""; SHA=""; DIR=""; NAME="libvgpu.so"; LOCK_TIMEOUT=300

log() { printf 'hami-core-swap: %s\n' "$*" >&2; }
json_escape() { printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr '\n\t' '  '; }
result() { # outcome message [extra json fields, already formatted ,"k":"v"...]
    printf '@@lucepatch-swap {"action":"%s","outcome":"%s","dir":"%s","name":"%s","node":"%s","message":"%s"%s}\n' \
        "$ACTION" "$1" "$(json_escape "$DIR")" "$(json_escape "$NAME")" \
        "$(json_escape "${NODE_NAME:-$(hostname 2>/dev/null || echo unknown)}")" "$(json_escape "$2")" "${3:-}"
}
refuse() { log "refused: $1"; result refused "$1" "${2:-}"; exit 1; }
usage() { log "usage: $1"; result usage "$1"; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --lib) LIB="${2:-}"; shift 2 ;;
        --sha256) SHA="${2:-}"; shift 2 ;;
        --dir) DIR="${2:-}"; shift 2 ;;
        --name) NAME="${2:-}"; shift 2 ;;
        --lock-timeout) LOCK_TIMEOUT="${2:-}"; shift 2 ;;
        *) usage "unknown argument '$1'" ;;
    esac
done
case "$ACTION" in install|rollback|status) ;; *) usage "action must be install, rollback or status" ;; esac
[ -n "$DIR" ] || usage "--dir is required"
case "$NAME" in */*|""|.*) usage "--name must be a plain file name" ;; esac
if [ "$ACTION" = install ]; then
    [ -n "$LIB" ] || usage "--lib is required for install"
    printf '%s' "$SHA" | grep -Eq '^[0-9a-f]{64}$' || usage "--sha256 must be 64 lowercase hex digits"
fi
for tool in sha256sum flock head od cp mv; do
    command -v "$tool" >/dev/null 2>&1 || { log "missing tool: $tool"; result environment "missing tool $tool"; exit 3; }
done
if [ "$ACTION" = install ]; then
    command -v nm >/dev/null 2>&1 || { log "missing tool: nm (binutils)"; result environment "missing tool nm (binutils): use an image with binutils"; exit 3; }
fi

TARGET="$DIR/$NAME"
STATE="$DIR/.lucepatch-state"
TMP_PREFIX=".$NAME.lucepatch-tmp."

sha_of() { sha256sum "$1" 2>/dev/null | cut -d' ' -f1; }
is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "7f454c46" ]; }
state_get() { [ -f "$STATE" ] && sed -n "s/^$1=//p" "$STATE" | tail -n 1; }
# exported (defined, dynamic) symbol names, sorted
symbols() { nm -D --defined-only "$1" 2>/dev/null | awk 'NF>=3 {print $3}' | sed 's/@.*//' | sort -u; }
# shared-region MAJOR.MINOR from the exported shrreg_{major,minor}_version() (Debug builds
# export them): the immediate moved into the return register. Empty when undeterminable.
shrreg_part() {
    command -v objdump >/dev/null 2>&1 || return 0
    objdump -d --disassemble="$2" "$1" 2>/dev/null \
        | grep -m1 -oE 'mov +\$0x[0-9a-f]+,%eax|mov +w0, #(0x)?[0-9a-f]+' \
        | grep -oE '[$#](0x)?[0-9a-f]+' | tr -d '$#' | { read -r v && printf '%d' "$v"; }
}
shrreg_version() {
    local a b; a="$(shrreg_part "$1" shrreg_major_version)"; b="$(shrreg_part "$1" shrreg_minor_version)"
    [ -n "$a" ] && [ -n "$b" ] && printf '%s.%s' "$a" "$b"
}
write_state() { # KEY=VALUE lines on stdin -> atomic replace
    local tmp="$DIR/${TMP_PREFIX}state"
    cat > "$tmp" && mv -f "$tmp" "$STATE"
}
install_copy() { # src expected_sha -> atomically replaces TARGET
    local src="$1" want="$2" tmp="$DIR/${TMP_PREFIX}$$" mode
    mode="$(stat -c %a "$TARGET" 2>/dev/null || echo 755)"
    cp "$src" "$tmp" || { rm -f "$tmp"; refuse "cannot write temp file in $DIR"; }
    chmod "$mode" "$tmp"
    sync "$tmp" 2>/dev/null || sync
    if [ "$(sha_of "$tmp")" != "$want" ]; then rm -f "$tmp"; refuse "temp copy checksum mismatch (disk full?)"; fi
    if [ -n "${LUCEPATCH_SWAP_TEST_PAUSE:-}" ]; then   # test-only: kill window
        : > "${LUCEPATCH_SWAP_TEST_PAUSE}.reached"
        while [ ! -e "${LUCEPATCH_SWAP_TEST_PAUSE}.go" ]; do sleep 0.05 9>&-; done
    fi
    mv -f "$tmp" "$TARGET" || { rm -f "$tmp"; refuse "rename onto $TARGET failed"; }
    sync "$DIR" 2>/dev/null || true
    [ "$(sha_of "$TARGET")" = "$want" ] || refuse "installed file does not verify (sha256 differs): inspect $TARGET"
}

[ -d "$DIR" ] || refuse "directory $DIR does not exist (is this a HAMi node? check devicePlugin.libPath)"
[ -L "$TARGET" ] && refuse "$TARGET is a symlink; lucepatch only swaps regular files"

if [ "$ACTION" = status ]; then
    cur="$(sha_of "$TARGET")"
    result status "current library" ",\"current_sha256\":\"$cur\",\"installed_sha256\":\"$(state_get installed_sha256)\",\"original_sha256\":\"$(state_get original_sha256)\",\"backup\":\"$(json_escape "$(state_get backup)")\""
    exit 0
fi

# One run per directory. The lock is on DIR itself: nothing is created to take it.
exec 9<"$DIR" || refuse "cannot open $DIR"
flock -w "$LOCK_TIMEOUT" 9 || refuse "another swap holds the lock on $DIR for more than ${LOCK_TIMEOUT}s"

[ -w "$DIR" ] || refuse "$DIR is read-only here (mount the hostPath read-write and run privileged)"
[ -f "$TARGET" ] || refuse "no installed library at $TARGET (HAMi not installed on this node?)"

if [ "$ACTION" = install ]; then
    [ -f "$LIB" ] || refuse "new library $LIB not found"
    got="$(sha_of "$LIB")"
    [ "$got" = "$SHA" ] || refuse "checksum mismatch for $LIB: expected $SHA, got $got" ",\"new_sha256\":\"$got\""
    is_elf "$LIB" || refuse "$LIB is not an ELF file"
    cur="$(sha_of "$TARGET")"
    if [ "$cur" = "$SHA" ]; then
        log "sha256 $SHA already installed: nothing to do"
        result noop "already installed" ",\"current_sha256\":\"$cur\""
        exit 0
    fi
    is_elf "$TARGET" || refuse "installed $TARGET is not an ELF file; refusing to compare symbols"
    missing="$(comm -13 <(symbols "$LIB") <(symbols "$TARGET"))"
    if [ -z "$(symbols "$LIB")" ]; then refuse "$LIB exports no dynamic symbols"; fi
    if [ -n "$missing" ]; then
        n="$(printf '%s\n' "$missing" | wc -l)"
        refuse "$LIB lacks $n exported symbol(s) of the installed library: $(printf '%s\n' "$missing" | head -n 5 | paste -sd, -)" ",\"missing_symbols\":$n"
    fi
    vnew="$(shrreg_version "$LIB")"; vold="$(shrreg_version "$TARGET")"
    if [ -n "$vnew" ] && [ -n "$vold" ] && [ "$vnew" != "$vold" ]; then
        refuse "shared-region version $vnew of $LIB differs from installed $vold: pods would refuse the region"
    fi
    [ -n "$vnew" ] && [ -n "$vold" ] || log "shared-region version not determinable (no exported shrreg_*_version); check skipped"
    # No state, but backups of OTHER libraries than the one in place: an earlier install replaced
    # them, so the library in place may be lucepatch's own (a backup of the library in place itself
    # is what a run killed before writing the state leaves: that one is still the original).
    if [ ! -f "$STATE" ]; then
        others="$(cd "$DIR" && ls "$NAME.backup-"* 2>/dev/null | grep -v -x -F "$NAME.backup-$cur" | head -n 3 | paste -sd, -)"
        [ -z "$others" ] || refuse "$DIR has backups of an earlier lucepatch install ($others) but no $STATE: the library in place may be lucepatch's own, so it cannot be backed up as the original. Restore the state file, or remove the backups once you know $TARGET is HAMi's"
    fi
    # leftovers of a killed run (we hold the lock, so they are not live)
    rm -f "$DIR/$TMP_PREFIX"* 2>/dev/null
    original="$(state_get original_sha256)"; backup="$(state_get backup)"
    history="$(state_get lucepatch_installed)"
    case ",$history," in *",$cur,"*) ours=1 ;; *) ours=0 ;; esac
    if [ "$ours" = 0 ] && { [ "$cur" != "$(state_get installed_sha256)" ] || [ -z "$backup" ]; }; then
        # not a library we installed (first run, or HAMi overwrote ours): back it up once
        original="$cur"; backup="$NAME.backup-$cur"
        if [ ! -f "$DIR/$backup" ] || [ "$(sha_of "$DIR/$backup")" != "$cur" ]; then
            cp "$TARGET" "$DIR/${TMP_PREFIX}backup" && mv -f "$DIR/${TMP_PREFIX}backup" "$DIR/$backup" \
                || { rm -f "$DIR/${TMP_PREFIX}backup"; refuse "cannot write backup $DIR/$backup"; }
            [ "$(sha_of "$DIR/$backup")" = "$cur" ] || refuse "backup $DIR/$backup does not verify"
            log "backed up $TARGET as $backup"
        fi
    fi
    install_copy "$LIB" "$SHA"
    case ",$history," in *",$SHA,"*) ;; *) history="${history:+$history,}$SHA" ;; esac
    printf 'installed_sha256=%s\noriginal_sha256=%s\nbackup=%s\nprevious_sha256=%s\nlucepatch_installed=%s\naction=install\nupdated_at=%s\n' \
        "$SHA" "$original" "$backup" "$cur" "$history" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" | write_state
    log "installed $SHA as $TARGET (previous $cur); running processes keep the old inode"
    result installed "installed" ",\"current_sha256\":\"$SHA\",\"previous_sha256\":\"$cur\",\"backup\":\"$(json_escape "$backup")\",\"shrreg_version\":\"$vnew\""
    exit 0
fi

# rollback
backup="$(state_get backup)"; original="$(state_get original_sha256)"
[ -n "$backup" ] && [ -n "$original" ] || refuse "no lucepatch state in $DIR: nothing to roll back"
[ -f "$DIR/$backup" ] || refuse "backup $DIR/$backup is missing: cannot roll back (reinstall HAMi's library instead)"
[ "$(sha_of "$DIR/$backup")" = "$original" ] || refuse "backup $DIR/$backup does not match its recorded sha256 $original"
cur="$(sha_of "$TARGET")"
if [ "$cur" = "$original" ]; then
    log "original library already in place: nothing to do"
    result noop "original already installed" ",\"current_sha256\":\"$cur\""
    exit 0
fi
installed="$(state_get installed_sha256)"
if [ "$cur" != "$installed" ]; then
    refuse "$TARGET (sha256 $cur) is not the library lucepatch installed ($installed): HAMi or someone replaced it since, so restoring the $original backup would overwrite a library lucepatch did not put there. Nothing changed; check the node's HAMi version and install a fix that fits it" ",\"current_sha256\":\"$cur\",\"installed_sha256\":\"$installed\""
fi
rm -f "$DIR/$TMP_PREFIX"* 2>/dev/null
install_copy "$DIR/$backup" "$original"
printf 'installed_sha256=%s\noriginal_sha256=%s\nbackup=%s\nprevious_sha256=%s\nlucepatch_installed=%s\naction=rollback\nupdated_at=%s\n' \
    "$original" "$original" "$backup" "$cur" "$(state_get lucepatch_installed)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" | write_state
log "rolled back $TARGET to $original"
result rolled-back "restored and verified" ",\"current_sha256\":\"$original\",\"previous_sha256\":\"$cur\""
exit 0
