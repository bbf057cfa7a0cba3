#!/usr/bin/env bash
# The QEMU test rig: boots Debian's cloud kernel under TCG with emulated NVMe ZNS
# namespaces and a zoned null_blk device, runs znswap's conformance suite and a verified
# bench against each through the kernel's real zoned interfaces, and fails unless every
# device reports PASS. See docs/qemu-rig.md.
#
# Usage: scripts/qemu/run.sh [--keep] [--timeout SECONDS]
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
work="$repo/target/qemu"
timeout_seconds=600
keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --keep) keep=1 ;;
        --timeout) timeout_seconds=$2; shift ;;
        -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

say() { printf '== %s\n' "$*"; }

# 1. Packages. Fail loudly if any cannot be installed: a silently skipped rig proves nothing.
missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
[ -x /bin/busybox ] && /bin/busybox --list 2>/dev/null | grep -qx insmod || missing+=(busybox-static)
command -v cpio >/dev/null || missing+=(cpio)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
file /bin/busybox 2>/dev/null | grep -q "statically linked" || {
    echo "error: /bin/busybox is not the static build; install busybox-static" >&2; exit 1; }

# 2. The kernel: whatever linux-image-cloud-amd64 depends on today (ABI not pinned).
mkdir -p "$work"
if [ ! -f "$work/kernel/vmlinuz" ]; then
    package=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image/{print $2}' | head -n 1)
    [ -n "$package" ] || { apt-get update -qq; package=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image/{print $2}' | head -n 1); }
    [ -n "$package" ] || { echo "error: cannot resolve linux-image-cloud-amd64" >&2; exit 1; }
    say "fetching $package"
    rm -rf "$work/kernel" "$work/deb" && mkdir -p "$work/deb"
    (cd "$work/deb" && apt-get download "$package" >/dev/null 2>&1)
    mkdir -p "$work/kernel/root"
    dpkg-deb -x "$work"/deb/*.deb "$work/kernel/root"
    cp "$work"/kernel/root/boot/vmlinuz-* "$work/kernel/vmlinuz"
fi
modules=$(ls -d "$work"/kernel/root/lib/modules/*)

# 3. The binary under test.
say "building znswap"
(cd "$repo" && cargo build --release -q -p znswap)
binary="$repo/target/release/znswap"

# 4. The initramfs: static busybox, the glibc-linked znswap with the libraries ldd
#    lists (mode 755, or the loader refuses them), the null_blk modules, our init.
root="$work/initramfs"
rm -rf "$root" && mkdir -p "$root"/{bin,dev,proc,sys,tmp,modules}
cp /bin/busybox "$root/bin/busybox"
cp "$binary" "$root/bin/znswap"
for lib in $(ldd "$binary" | grep -oE '/[^ ]+'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
    chmod 755 "$root$lib"
done
cp "$modules/kernel/fs/configfs/configfs.ko" "$modules/kernel/drivers/block/null_blk/null_blk.ko" "$root/modules/"
cp "$repo/scripts/qemu/init.sh" "$root/init"
cp "$repo/scripts/qemu/tests.sh" "$root/tests.sh"
chmod 755 "$root/init" "$root/bin/znswap"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initramfs.cpio.gz"

# 5. The namespaces' backing files (sparse).
images="$work/images"
rm -rf "$images" && mkdir -p "$images"
for name in zns md16 md64 npot; do
    truncate -s 1G "$images/$name.img"
done
zoned='zoned=true,zoned.zone_size=64M,zoned.zone_capacity=62M,zoned.max_open=14,zoned.max_active=14'
ns() { # name serial extra
    echo "-drive file=$images/$1.img,id=$1,format=raw,if=none"
    echo "-device nvme,serial=$2,id=ctrl_$1"
    echo "-device nvme-ns,drive=$1,bus=ctrl_$1,nsid=1,logical_block_size=4096,physical_block_size=4096,$3"
}

say "booting the guest (TCG; timeout ${timeout_seconds}s)"
log="$work/console.log"
started=$(date +%s)
# shellcheck disable=SC2046
timeout "$timeout_seconds" qemu-system-x86_64 \
    -machine q35 -accel tcg -cpu max -smp 2 -m 3G \
    -nographic -no-reboot -serial mon:stdio \
    -kernel "$work/kernel/vmlinuz" -initrd "$work/initramfs.cpio.gz" \
    -append "console=ttyS0 edd=off panic=-1 quiet loglevel=4" \
    $(ns zns znswap-zns "$zoned") \
    $(ns md16 znswap-md16 "$zoned,ms=16,mset=0") \
    $(ns md64 znswap-md64 "$zoned,ms=64,mset=1") \
    $(ns npot znswap-npot "zoned=true,zoned.zone_size=32M,zoned.zone_capacity=27M,zoned.max_open=6,zoned.max_active=8") \
    </dev/null > "$log" 2>&1 || true
elapsed=$(( $(date +%s) - started ))
tr -d '\r' < "$log" | grep -E '^(ZNSWAP|#)' || true
say "guest ran ${elapsed}s; full console log: $log"

# 6. Verdict: from the result lines the guest printed (QEMU exits 0 on any poweroff).
expected=$(tr -d '\r' < "$log" | grep -c '^ZNSWAP-EXPECT ' || true)
passed=$(tr -d '\r' < "$log" | grep -c '^ZNSWAP-RESULT .* PASS' || true)
failed=$(tr -d '\r' < "$log" | grep -c '^ZNSWAP-RESULT .* FAIL' || true)
if ! tr -d '\r' < "$log" | grep -q '^ZNSWAP-DONE'; then
    echo "error: the guest did not finish (timeout or crash); see $log" >&2
    tail -n 40 "$log" >&2
    exit 1
fi
echo "qemu rig: $passed passed, $failed failed"
[ "$keep" = 1 ] || rm -rf "$images"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ] && [ "$passed" = "$expected" ]
