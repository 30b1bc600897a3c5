#!/usr/bin/env bash
# Runs an x86-64 Linux binary (static, or dynamic: its shared libraries are copied along) on an
# *emulated* AVX-512 CPU (Bochs), so that AVX-512 kernels can be tested on hosts without
# AVX-512 (they SIGILL natively).
#
#   scripts/avx512_bochs.sh [--cpu tigerlake] [--timeout SECONDS] [--add PATH]... [--env NAME=VALUE]... BINARY [ARGS...]
#
# --cpu: a Bochs cpudb model with AVX-512: tigerlake (default; F/CD/DQ/BW/VL/IFMA/VBMI/VBMI2/VNNI/
# BITALG/VPOPCNTDQ/VP2INTERSECT, GFNI/VAES) or corei7_skylake_x (F/CD/DQ/BW/VL only).
# --add: copy a file or directory into the guest's working directory (/work) for the binary.
# --env: export NAME=VALUE in the guest before the binary runs.
#
# How: a Debian kernel (unpacked from its .deb, not installed) boots from an isolinux ISO with
# an initramfs holding static busybox, BINARY and an /init that runs `BINARY ARGS`, prints
# `EFIM_EXIT_CODE=<rc>` on the serial console and powers off. Bochs runs headless (its rfb
# display with no client; Debian's build has no `nogui`), the serial console goes to a file
# that is streamed here, and this script exits with the binary's exit code (or 124 on
# timeout / 125 when the guest never reported one). Bochs emulates every instruction in
# software: the boot takes ~20-30 s and code runs ~100x slower than natively (much slower
# still for AVX-512 instructions); keep tests small.
# Env: BOCHS_MEM_MB (guest RAM, default 1024), BOCHS_IPS (emulated instr/s, default 100M),
# BOCHS_KERNEL_ARGS (extra kernel args, e.g. "loglevel=8" to see the boot), KEEP_RUN=1 (keep files).
# Everything is cached under .deps/bochs/ (git-ignored); per-run files go to .deps/bochs/run.$$.
set -euo pipefail
# The body is one { } block, so bash parses all of it before running: editing this file while
# a (long) run is in flight cannot derail that run.
{
cd "$(dirname "$0")/.."
DEPS=$PWD/.deps/bochs

usage() { echo "usage: $0 [--cpu MODEL] [--timeout SECONDS] [--add PATH]... [--env NAME=VALUE]... BINARY [ARGS...]" >&2; exit 2; }
CPU=tigerlake
TIMEOUT=1200
ADD=()
ENVS=()
while [ $# -gt 0 ]; do
  case $1 in
    --cpu) CPU=${2:?}; shift 2 ;;
    --timeout) TIMEOUT=${2:?}; shift 2 ;;
    --add) ADD+=("$(realpath "${2:?}")"); shift 2 ;;
    --env) ENVS+=("${2:?}"); shift 2 ;;
    -h|--help) usage ;;
    --) shift; break ;;
    -*) usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
BIN=$(realpath "$1"); shift
[ -f "$BIN" ] || { echo "avx512_bochs: no such file: $BIN" >&2; exit 2; }

# --- 1. dependencies (idempotent) -------------------------------------------------------------
# Installed: bochs (+ bochs-term only to satisfy its "bochs-gui" dependency without pulling wx),
# its BIOSes, genisoimage for the ISO, cpio for the initramfs, file for the static check.
APT_PACKAGES=(bochs bochs-term bochsbios vgabios genisoimage cpio file)
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "avx512_bochs: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Downloaded and unpacked (never installed, so the host's own kernel/busybox stay untouched):
# the kernel linux-image-cloud-amd64 points to, busybox-static, isolinux (+ ldlinux.c32). The
# *cloud* kernel is used because it is LZ4-compressed: the generic one is XZ, and decompressing
# it in the emulator alone takes ~2 minutes (the cloud one boots to /init in ~20 s).
if [ ! -f "$DEPS/boot/vmlinuz" ] || [ ! -x "$DEPS/root/bin/busybox" ] || [ ! -f "$DEPS/root/ldlinux.c32" ]; then
  kpkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  [ -n "$kpkg" ] || { echo "avx512_bochs: cannot resolve linux-image-cloud-amd64" >&2; exit 1; }
  echo "avx512_bochs: downloading $kpkg busybox-static isolinux syslinux-common"
  rm -rf "$DEPS/dl" "$DEPS/boot" "$DEPS/root" && mkdir -p "$DEPS/dl/x" "$DEPS/boot" "$DEPS/root/bin"
  (cd "$DEPS/dl" && apt-get download -qq -o APT::Sandbox::User=root \
    "$kpkg" busybox-static isolinux syslinux-common)
  # Only vmlinuz is needed from the kernel .deb (serial console, initramfs, devtmpfs are built in).
  dpkg-deb --fsys-tarfile "$DEPS"/dl/linux-image-*.deb | tar -x -C "$DEPS/dl/x" --wildcards './boot/vmlinuz-*'
  for d in "$DEPS"/dl/busybox-static_*.deb "$DEPS"/dl/isolinux_*.deb "$DEPS"/dl/syslinux-common_*.deb; do
    dpkg-deb -x "$d" "$DEPS/dl/x"
  done
  cp "$DEPS/dl/x/bin/busybox" "$DEPS/root/bin/busybox"
  cp "$DEPS/dl/x/usr/lib/ISOLINUX/isolinux.bin" "$DEPS/dl/x/usr/lib/syslinux/modules/bios/ldlinux.c32" "$DEPS/root/"
  mv "$DEPS"/dl/x/boot/vmlinuz-* "$DEPS/boot/vmlinuz"   # last: marks the cache complete
  echo "$kpkg" > "$DEPS/boot/kernel-package"
  rm -rf "$DEPS/dl"
fi

# --- 2. initramfs with busybox + BINARY + /init --------------------------------------------
info=$(file -L "$BIN")
if ! grep -q 'ELF 64-bit.*x86-64' <<<"$info"; then
  echo "avx512_bochs: $BIN must be an x86-64 ELF executable; file says:" >&2
  echo "  $info" >&2
  exit 2
fi
# A dynamically linked binary takes its loader and shared libraries along, at their host paths.
libs=()
if ! grep -Eq 'statically linked|static-pie linked' <<<"$info"; then
  mapfile -t libs < <(ldd "$BIN" | grep -o '/[^ ]*' | sort -u)
  [ ${#libs[@]} -gt 0 ] || { echo "avx512_bochs: ldd found no libraries for $BIN" >&2; exit 2; }
fi
RUN=$DEPS/run.$$
rm -rf "$RUN" && mkdir -p "$RUN/initrd/bin" "$RUN/initrd/work" "$RUN/iso/isolinux"
trap '[ -n "${KEEP_RUN:-}" ] || rm -rf "$RUN"' EXIT
cp "$DEPS/root/bin/busybox" "$RUN/initrd/bin/busybox"
cp "$BIN" "$RUN/initrd/test.bin"
for lib in "${libs[@]}"; do cp -L --parents "$lib" "$RUN/initrd/"; done
[ ${#ADD[@]} -eq 0 ] || cp -r "${ADD[@]}" "$RUN/initrd/work/"
# ARGS are embedded into /init shell-quoted (printf %q output is valid for busybox ash).
args=""; [ $# -gt 0 ] && args=$(printf ' %q' "$@")
cat > "$RUN/initrd/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /tmp
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev; mount -t tmpfs tmp /tmp
echo "EFIM_CPU \$(grep -m1 '^model name' /proc/cpuinfo)"
echo "EFIM_CPU \$(grep -m1 '^flags' /proc/cpuinfo)"
echo "EFIM_RUN_BEGIN uptime=\$(cut -d' ' -f1 /proc/uptime)"
cd /work
$(for e in "${ENVS[@]}"; do printf 'export %q\n' "$e"; done)
/test.bin$args
rc=\$?
echo "EFIM_RUN_END uptime=\$(cut -d' ' -f1 /proc/uptime)"
echo "EFIM_EXIT_CODE=\$rc"
echo "EFIM_DONE"   # the host waits for this line, so the marker line above is complete
sleep 2   # let the UART drain (the host kills Bochs once it sees EFIM_DONE)
poweroff -f
EOF
chmod +x "$RUN/initrd/init"
# Left uncompressed: inflating it in the emulated kernel costs far more than reading it.
(cd "$RUN/initrd" && find . | cpio -o -H newc --quiet) > "$RUN/iso/initrd.cpio"

# --- 3. bootable ISO (isolinux) and Bochs config ---------------------------------------------
cp "$DEPS/boot/vmlinuz" "$RUN/iso/vmlinuz"
cp "$DEPS/root/isolinux.bin" "$DEPS/root/ldlinux.c32" "$RUN/iso/isolinux/"
# Kernel args: serial console, no mitigations, and clearcpuid= hiding from the *kernel* (user
# space still sees them via CPUID) features that Bochs 2.7 emulates wrongly: pku/ospke and
# xsaves/xsavec (CPUID leaf 0xD sizes are wrong -> the kernel disables XSAVE, i.e. no AVX at all),
# fsrm (the kernel's `rep movsb` memcpy corrupts memory and the boot hangs), aperfmperf (MSRs
# missing). Harmless for models that lack them.
cat > "$RUN/iso/isolinux/isolinux.cfg" <<EOF
DEFAULT linux
PROMPT 0
TIMEOUT 0
LABEL linux
  KERNEL /vmlinuz
  APPEND initrd=/initrd.cpio console=ttyS0,115200 quiet loglevel=3 panic=0 mitigations=off nokaslr tsc=reliable no_timer_check cryptomgr.notests clearcpuid=pku,ospke,xsaves,xsavec,fsrm,aperfmperf ${BOCHS_KERNEL_ARGS:-}
EOF
genisoimage -quiet -o "$RUN/boot.iso" -b isolinux/isolinux.bin -c isolinux/boot.cat \
  -no-emul-boot -boot-load-size 4 -boot-info-table -R -J "$RUN/iso"

SERIAL=$RUN/serial.txt
: > "$SERIAL"
# clock sync=none: guest time follows the emulated instruction count (ips), so the boot never
# waits on wall-clock time; every log action is non-interactive so Bochs never stops to ask.
cat > "$RUN/bochsrc" <<EOF
cpu: model=$CPU, count=1, ips=${BOCHS_IPS:-100000000}
memory: guest=${BOCHS_MEM_MB:-1024}, host=${BOCHS_MEM_MB:-1024}
romimage: file=/usr/share/bochs/BIOS-bochs-latest
vgaromimage: file=/usr/share/vgabios/vgabios.bin
ata0-master: type=cdrom, path="$RUN/boot.iso", status=inserted
boot: cdrom
com1: enabled=1, mode=file, dev="$SERIAL"
display_library: rfb, options="timeout=0"
clock: sync=none, time0=local
mouse: enabled=0
speaker: enabled=0
sound: driver=dummy
log: "$RUN/bochs.log"
panic: action=fatal
error: action=report
info: action=ignore
debug: action=ignore
EOF

# --- 4. boot, stream the serial console, wait for the exit-code marker -----------------------
echo "avx512_bochs: booting $(basename "$BIN") on emulated '$CPU' (timeout ${TIMEOUT}s)"
start=$(date +%s)
# Debian's bochs-bin is built with the internal debugger, which stops at the first instruction:
# the -rc command file continues the simulation, then quits when it ends.
printf 'c\nquit\n' > "$RUN/debugger.rc"
timeout -k 5 "$TIMEOUT" nice -n 5 bochs-bin -q -f "$RUN/bochsrc" -rc "$RUN/debugger.rc" </dev/null >"$RUN/bochs.out" 2>&1 &
bochs_pid=$!
tail -n +1 -f "$SERIAL" & tail_pid=$!
trap 'kill $bochs_pid $tail_pid 2>/dev/null || true; [ -n "${KEEP_RUN:-}" ] || rm -rf "$RUN"' EXIT
status=""; t_begin=""
while kill -0 "$bochs_pid" 2>/dev/null; do
  sleep 1
  [ -z "$t_begin" ] && grep -aq 'EFIM_RUN_BEGIN' "$SERIAL" && t_begin=$(date +%s)
  if grep -aq 'EFIM_DONE' "$SERIAL"; then status=marker; break; fi
  if grep -aq 'Kernel panic' "$SERIAL"; then status=panic; sleep 1; break; fi
done
end=$(date +%s)
brc=0
if [ -z "$status" ]; then wait "$bochs_pid" || brc=$?; else kill "$bochs_pid" 2>/dev/null || true; fi
wait "$bochs_pid" 2>/dev/null || true
kill "$tail_pid" 2>/dev/null || true; wait "$tail_pid" 2>/dev/null || true
echo
[ -z "${KEEP_RUN:-}" ] || echo "avx512_bochs: run files kept in $RUN"
[ -n "$t_begin" ] && echo "avx512_bochs: boot took $((t_begin - start))s, binary ran $((end - t_begin))s (wall)"
rc=$(grep -ao 'EFIM_EXIT_CODE=[0-9]*' "$SERIAL" | tail -n 1 | cut -d= -f2 || true)
if [ "$status" = marker ] && [ -n "$rc" ]; then
  echo "avx512_bochs: binary exited with $rc"
  exit "$rc"
elif [ "$status" = panic ]; then
  echo "avx512_bochs: guest kernel panicked (see serial output above)" >&2
  exit 125
elif [ "$brc" -eq 124 ] || [ "$brc" -eq 137 ]; then
  echo "avx512_bochs: TIMEOUT after ${TIMEOUT}s without an EFIM_EXIT_CODE marker" >&2
  exit 124
fi
echo "avx512_bochs: Bochs stopped (rc $brc) without an EFIM_EXIT_CODE marker; its last messages:" >&2
tail -n 20 "$RUN/bochs.out" "$RUN/bochs.log" >&2 2>/dev/null || true
exit 125
}
