#!/bin/busybox sh
# Guest init for the QEMU rig: finds the zoned devices, runs the checks, prints one
# `ZNSWAP-RESULT <device> PASS|FAIL` line per test and `ZNSWAP-DONE`, powers off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /tmp && mount -t tmpfs tmp /tmp
insmod /modules/configfs.ko
insmod /modules/null_blk.ko nr_devices=1 gb=1 zoned=1 zone_size=64 zone_capacity=62 memory_backed=1 zone_max_open=14
sleep 1

echo "# kernel $(uname -r)"
for dev in /sys/block/*; do
    name=${dev##*/}
    zoned=$(cat "$dev/queue/zoned" 2>/dev/null)
    echo "# $name zoned=$zoned lbs=$(cat $dev/queue/logical_block_size) chunk=$(cat $dev/queue/chunk_sectors) nr_zones=$(cat $dev/queue/nr_zones 2>/dev/null) open=$(cat $dev/queue/max_open_zones 2>/dev/null) active=$(cat $dev/queue/max_active_zones 2>/dev/null) append=$(cat $dev/queue/zone_append_max_bytes 2>/dev/null) gran=$(cat $dev/queue/zone_write_granularity 2>/dev/null) sched=$(cat $dev/queue/scheduler)"
done
for ctrl in /sys/class/nvme/nvme*; do
    echo "# ${ctrl##*/} serial=$(cat $ctrl/serial) $(ls $ctrl | grep -E '^(nvme|ng)' | tr '\n' ' ')"
done
ls -la /dev/ng* /dev/nvme* /dev/nullb* 2>&1 | sed 's/^/# /'

if [ -f /tests.sh ]; then . /tests.sh; fi
echo ZNSWAP-DONE
poweroff -f
