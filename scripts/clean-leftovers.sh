#!/usr/bin/env bash
# Removes SPACE host objects that no live process owns: what killed test and bench runs
# leave behind (node agents cannot clean up after SIGKILL). Prints each thing it removes
# (or, with --dry-run, would remove) and each candidate it keeps, with the reason.
#
#   bash scripts/clean-leftovers.sh [--dry-run] [--orphan-sandboxes]        (root)
#
# --orphan-sandboxes also deletes the containers of test, bench and lab nodes whose
# harness is gone, and kills the processes of sandboxes on a bridge no node serves (a
# SIGKILLed test or stack leaves its sandboxes running, and they keep their netns, bridge
# and cache mount alive). Never those on space0 (a stopped `space up` adopts them).
#
# CLEAN_LEFTOVERS_MIN_AGE_S (default 60): namespaces younger than this are kept.
# CLEAN_LEFTOVERS_ONLY=<regex>: only objects whose name or path matches (tests).
#
# Owned, never touched:
#   bridge (sx*, sp*, slb*)  a live process listens on one of its addresses (node resolver,
#                            egress proxy, lab API), names it (SPACE_NODE_BRIDGE=, argv), or
#                            one of its ports leads to a namespace with live processes;
#                            space0 also while a `space up`/`space node` with the default scope runs
#   nft table (space*)       its inet rules name a kept bridge, or a live process names it
#                            (SPACE_NODE_NFT_TABLE=); a bridge-family table follows its inet twin
#   netns (<bridge>-<sandbox id or pool<n>>, and from earlier versions sandbox ids, pool<n>,
#         space-*, sp*)  it has processes, a live process names it
#                            (nsenter --net=/run/netns/<name>), a port of a kept bridge leads
#                            into it, or it is younger than a minute (a slot being set up)
#   mounts of a /tmp data dir  a live process has a file, cwd or argv/env under it, a
#                            container still mounts its filesystem, or its
#                            .space-harness-pid names a live process
# Veths go with their namespace, or with their stale bridge.
set -euo pipefail

dry=0
orphans=0
for arg in "$@"; do
  case $arg in
    --dry-run) dry=1 ;;
    --orphan-sandboxes) orphans=1 ;;
    *) echo "usage: $0 [--dry-run] [--orphan-sandboxes]" >&2; exit 2 ;;
  esac
done
only() { [[ -z ${CLEAN_LEFTOVERS_ONLY:-} || $1 =~ $CLEAN_LEFTOVERS_ONLY ]]; }
[[ $(id -u) -eq 0 ]] || { echo "clean-leftovers: run as root" >&2; exit 1; }

act() { # act <what> <command...>
  local what=$1; shift
  if ((dry)); then echo "clean-leftovers: would remove $what"; return; fi
  if "$@" 2>/dev/null; then echo "clean-leftovers: removed $what"; else echo "clean-leftovers: could not remove $what" >&2; fi
}
keep() { echo "clean-leftovers: kept $1 ($2)"; }

# --- what live processes hold -------------------------------------------------------
refs=$(mktemp)
trap 'rm -f "$refs"' EXIT
declare -A ns_live=()      # net:[inode] of every live process
declare -A foreign_dev=()  # major:minor mounted in another mount namespace (containers)
default_scope=0
self_mnt=$(readlink /proc/self/ns/mnt)
scan() {
  local p pid cmd env net mnt dev
  local -A mnt_seen=()
  : >"$refs"
  ns_live=() foreign_dev=() default_scope=0
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    [[ -n $cmd ]] || continue # kernel thread
    env=$(tr '\0' '\n' 2>/dev/null <"$p/environ") || env=""
    printf '%s\n%s\n' "$cmd" "$env" >>"$refs"
    if [[ $cmd =~ space(\.mjs)?\ (up|node)( |$) ]] && ! grep -q '^SPACE_NODE_BRIDGE=.' <<<"$env"; then default_scope=1; fi
    net=$(readlink "$p/ns/net" 2>/dev/null) && ns_live[$net]=1
    mnt=$(readlink "$p/ns/mnt" 2>/dev/null) || continue
    if [[ $mnt != "$self_mnt" && -z ${mnt_seen[$mnt]:-} ]]; then
      mnt_seen[$mnt]=1
      while read -r dev; do foreign_dev[$dev]=1; done < <(awk '{print $3}' "$p/mountinfo" 2>/dev/null | sort -u)
    fi
  done
}
scan
named() { grep -qF -- "$1" "$refs"; }
harness_alive() { # harness_alive <data dir>: its .space-harness-pid names a live process
  local owner
  [[ -f $1/.space-harness-pid ]] || return 1
  owner=$(tr -dc 0-9 <"$1/.space-harness-pid")
  [[ -n $owner && -d /proc/$owner ]]
}

# --- sandboxes of dead harnesses (--orphan-sandboxes) ---------------------------------------
# Runtime state dirs of test, bench and lab nodes; a /tmp data dir's `runc` is a test stack's.
# Only with the flag: these are running processes (CI passes it; nothing else runs then).
if ((orphans)); then
  deleted=0
  for st in /run/space-test/* /run/space-bench/* /run/space-lab/* /run/space-bench-tpl-* /run/space-e2e-tpl-* /tmp/*/runc; do
    [[ -d $st ]] && only "$st" || continue
    case $st in
      /run/space-test/* | /run/space-bench/*) data=/tmp/${st##*/} ;;
      /tmp/*/runc) data=${st%/runc} ;;
      *) data="" ;;
    esac
    why=""
    named "$st" && why="a live process names it"
    [[ -z $why && -n $data ]] && named "$data" && why="a live process names $data"
    [[ -z $why && -n $data ]] && harness_alive "$data" && why="its harness process lives"
    for c in "$st"/*/; do
      [[ -d $c ]] || continue
      id=$(basename "$c")
      if [[ -n $why ]]; then keep "sandbox $id ($st)" "$why"; continue; fi
      act "sandbox $id ($st)" sh -c 'runc --root "$1" delete --force "$2" 2>/dev/null || crun --root "$1" delete --force "$2"' _ "$st" "$id" && deleted=1
    done
    [[ -z $why && $st == /run/* ]] && ! ((dry)) && rmdir "$st" 2>/dev/null || true
  done
  ((deleted && !dry)) && scan
fi

listening=" $(ss -Hlntu 2>/dev/null | awk '{print $5}' | sed 's/:[^:]*$//; s/%.*//' | tr '\n' ' ') "

declare -A nsid_name=()    # netns id -> name
while read -r name rest; do
  [[ $rest =~ \(id:\ ([0-9]+)\) ]] && nsid_name[${BASH_REMATCH[1]}]=$name
done < <(ip netns list)
ns_has_procs() { # ns_has_procs <name>
  local ino
  ino=$(stat -L -c %i "/run/netns/$1" 2>/dev/null) || return 1
  [[ -n ${ns_live["net:[$ino]"]:-} ]]
}

# Host veths: name, master, peer namespace name.
declare -a veths=()
while read -r v master nsid; do
  veths+=("$v $master ${nsid_name[$nsid]:--}")
done < <(ip -j link show type veth | python3 -c '
import json, sys
for l in json.load(sys.stdin):
    print(l["ifname"], l.get("master", "-"), l.get("link_netnsid", "-"))')

# --- bridges --------------------------------------------------------------------------
kill_netns() { # kill_netns <name>: SIGKILL every process in the namespace
  local ino p
  ino=$(stat -L -c %i "/run/netns/$1") || return 1
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/ns/net" 2>/dev/null) == "net:[$ino]" ]] && kill -9 "${p#/proc/}" 2>/dev/null
  done
  return 0
}
killed=0
declare -A bridge_live=() stale_bridges=()
for br in $(ip -j link show type bridge | python3 -c 'import json,sys; print(" ".join(l["ifname"] for l in json.load(sys.stdin)))'); do
  [[ $br =~ ^(sx|sp|slb) ]] && only "$br" || continue
  why=""
  for a in $(ip -4 -o addr show dev "$br" | awk '{print $4}' | cut -d/ -f1); do
    [[ $listening == *" $a "* ]] && why="a process listens on $a"
  done
  [[ -z $why ]] && grep -qE -- "(^|[ =])$br( |$)" "$refs" && why="a live process names it"
  [[ -z $why && $br == space0 && $default_scope == 1 ]] && why="a space up/node with the default scope runs"
  if [[ -z $why ]]; then
    for entry in "${veths[@]}"; do
      read -r v master ns <<<"$entry"
      [[ $master == "$br" && $ns != - ]] && ns_has_procs "$ns" || continue
      # No node serves this bridge: its sandboxes are orphans (their node died). Not
      # space0: a stopped `space up` keeps its sandboxes for the next start to adopt.
      if ((orphans)) && [[ $br != space0 ]]; then
        act "sandbox processes in netns $ns (port $v of $br, which no node serves)" kill_netns "$ns" && killed=1
      else
        why="port $v leads to netns $ns, which has processes"
      fi
    done
  fi
  if [[ -n $why ]]; then bridge_live[$br]=1; keep "bridge $br" "$why"; else stale_bridges[$br]=1; fi
done
((killed && !dry)) && sleep 1 && scan

# --- network namespaces (first: their veth pairs go with them) ---------------------------
now=$(date +%s)
min_age=${CLEAN_LEFTOVERS_MIN_AGE_S:-60}
for ns in $(ip netns list | awk '{print $1}'); do
  [[ $ns =~ ^([a-z0-9]{20}|pool[0-9]+|space-.*|sp.*|(sx|slb)[a-z0-9]*-([a-z0-9]{20}|pool[0-9]+))$ ]] && only "$ns" || continue
  why=""
  ns_has_procs "$ns" && why="it has processes"
  [[ -z $why ]] && named "/run/netns/$ns" && why="a live process names it"
  if [[ -z $why ]]; then
    for entry in "${veths[@]}"; do
      read -r v master peer <<<"$entry"
      [[ $peer == "$ns" && -n ${bridge_live[$master]:-} ]] && why="its veth $v is a port of live bridge $master"
    done
  fi
  age=$((now - $(stat -c %Y "/run/netns/$ns" 2>/dev/null || echo "$now")))
  [[ -z $why && $age -lt $min_age ]] && why="created ${age}s ago"
  if [[ -n $why ]]; then keep "netns $ns" "$why"; else act "netns $ns" ip netns delete "$ns"; fi
done

# --- ports of stale bridges left without a namespace to take them ------------------------
for entry in "${veths[@]}"; do
  read -r v master peer <<<"$entry"
  [[ -n ${stale_bridges[$master]:-} ]] || continue
  ip link show "$v" >/dev/null 2>&1 || continue
  act "veth $v (port of $master)" ip link delete "$v"
done

# --- nft tables ------------------------------------------------------------------------
declare -A table_live=()
while read -r _ family table; do
  [[ $family == inet && $table == space* ]] && only "$table" || continue
  why=""
  for br in $(nft list table inet "$table" 2>/dev/null | grep -oE 'iifname "[^"]+"' | cut -d'"' -f2 | sort -u); do
    [[ -n ${bridge_live[$br]:-} ]] && why="its rules name live bridge $br"
  done
  [[ -z $why ]] && grep -qx -- "SPACE_NODE_NFT_TABLE=$table" "$refs" && why="a live process names it"
  [[ -z $why && $table == space && $default_scope == 1 ]] && why="a space up/node with the default scope runs"
  if [[ -n $why ]]; then table_live[$table]=1; keep "nft table inet $table" "$why"; fi
done < <(nft list tables)
while read -r _ family table; do
  [[ $table == space* ]] && only "$table" || continue
  [[ $family == inet || $family == bridge ]] || continue
  if [[ -n ${table_live[$table]:-} ]]; then
    [[ $family == bridge ]] && keep "nft table bridge $table" "its inet twin is kept"
    continue
  fi
  if [[ $family == bridge ]] && grep -qx -- "SPACE_NODE_NFT_TABLE=$table" "$refs"; then keep "nft table bridge $table" "a live process names it"; continue; fi
  act "nft table $family $table" nft delete table "$family" "$table"
done < <(nft list tables)

# --- bridges (after their tables: nothing refers to them any more) ------------------------
for br in "${!stale_bridges[@]}"; do
  act "bridge $br ($(ip -4 -o addr show dev "$br" | awk '{print $4}' | tr '\n' ' ' | sed 's/ $//'))" ip link delete "$br"
done

# --- mounts of data dirs under /tmp ----------------------------------------------------------
declare -A dirs=()
while read -r target; do
  [[ $target =~ ^(/tmp/[^/]+)/ ]] && dirs[${BASH_REMATCH[1]}]=1
done < <(findmnt -rn -t btrfs -o TARGET)
for d in "${!dirs[@]}"; do
  only "$d" || continue
  why=""
  harness_alive "$d" && why="its harness process lives"
  [[ -z $why ]] && named "$d" && why="a live process names it"
  if [[ -z $why ]]; then
    for link in /proc/[0-9]*/cwd /proc/[0-9]*/fd/*; do
      t=$(readlink "$link" 2>/dev/null) || continue
      if [[ $t == "$d" || $t == "$d/"* ]]; then pid=${link#/proc/}; why="process ${pid%%/*} has it open"; break; fi
    done
  fi
  if [[ -z $why ]]; then
    while read -r dev; do [[ -n ${foreign_dev[$dev]:-} ]] && why="a container mounts its filesystem ($dev)"; done \
      < <(findmnt -rn -o TARGET,MAJ:MIN | awk -v d="$d/" 'index($1, d) == 1 {print $2}' | sort -u)
  fi
  if [[ -n $why ]]; then keep "mounts under $d" "$why"; continue; fi
  loops=$(findmnt -rn -t btrfs -o TARGET,SOURCE | awk -v d="$d/" 'index($1, d) == 1 {print $2}' | sed 's/\[.*//' | grep '^/dev/loop' | sort -u || true)
  # Deepest first (the roots bind mount before the cache mount); never deleting through a mount.
  for m in $(findmnt -rn -o TARGET | awk -v d="$d/" 'index($1, d) == 1' | awk '{print length, $0}' | sort -rn | cut -d' ' -f2-); do
    act "mount $m" umount "$m"
  done
  for l in $loops; do
    ((dry)) && continue
    [[ -e /sys/block/${l#/dev/}/loop/backing_file ]] && act "loop device $l" losetup -d "$l"
  done
done
exit 0
