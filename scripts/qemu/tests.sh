# The rig's test matrix, sourced by the guest's init. Each test prints
# `ZNSWAP-EXPECT <name>` before it runs and `ZNSWAP-RESULT <name> PASS|FAIL` after.

# The controller whose serial is $1 (QEMU pads serials with spaces).
controller() {
    for ctrl in /sys/class/nvme/nvme*; do
        if [ "$(cat "$ctrl/serial" | tr -d ' ')" = "$1" ]; then echo "${ctrl##*/}"; return; fi
    done
}

# run_test NAME COMMAND...: runs the command, prints its output as comments, and a result.
run_test() {
    name=$1; shift
    echo "ZNSWAP-EXPECT $name"
    if "$@" > /tmp/out 2>&1; then verdict=PASS; else verdict=FAIL; fi
    sed "s/^/# $name: /" /tmp/out | tail -n 40
    echo "ZNSWAP-RESULT $name $verdict"
}

# device_tests NAME PATH: the conformance suite and a short bench on one device.
device_tests() {
    run_test "$1-conformance" znswap device check --device "$2"
    run_test "$1-bench" znswap device bench --device "$2" --seconds 1 --bytes 16M
}

device_tests nullb0-zbd /dev/nullb0
for serial in zns md16 npot; do
    ctrl=$(controller "znswap-$serial")
    device_tests "$serial-zbd" "/dev/${ctrl}n1"
done

# NVMe passthrough on the generic char devices (md64's block device is hidden: this is
# its only way in).
for serial in zns md16 md64 npot; do
    ctrl=$(controller "znswap-$serial")
    device_tests "$serial-nvme" "/dev/ng${ctrl#nvme}n1"
done

# The live pager through the kernel's userfaultfd, swapping to a real zoned device. The
# bench exits non-zero on any corrupted or lost page; the test also requires that pages
# really went out and came back (a budget that was never exceeded proves nothing).
swap_bench() {
    name=$1; shift
    echo "ZNSWAP-EXPECT $name"
    verdict=FAIL
    if znswap bench "$@" --json > /tmp/out 2>/tmp/err; then
        out=$(grep -E '"swap_outs_written"|"swap_in_pages_with_verification"' /tmp/out | tr -dc '0-9 \n' | tr '\n' ' ')
        set -- $out
        if [ "${1:-0}" -gt 0 ] && [ "${2:-0}" -gt 0 ]; then verdict=PASS; fi
    fi
    grep -E '"(workload|device|swap_outs_written|swap_in_pages_with_verification|swap_out_mib_s|fault_p50_us|fault_p99_us|pages_verified|corrupted|lost_pages|waf)"' /tmp/out | sed "s/^/# $name: /"
    sed "s/^/# $name: /" /tmp/err | tail -n 5
    echo "ZNSWAP-RESULT $name $verdict"
}

swap_bench zbd-swap-bench --device "/dev/$(controller znswap-zns)n1" --workload anon-w-seq --memory 4M --wss 16M --seconds 8 --ceiling-seconds 0.5
swap_bench nvme-md16-swap-bench --device "/dev/ng$(controller znswap-md16 | tr -d nvme)n1" --workload hotspot --memory 4M --wss 16M --seconds 8 --ceiling-seconds 0.5
swap_bench nullb-swap-bench --device /dev/nullb0 --workload anon-r-rand --memory 4M --wss 12M --seconds 8 --ceiling-seconds 0.5
swap_bench nvme-md64-swap-bench --device "/dev/ng$(controller znswap-md64 | tr -d nvme)n1" --workload pmbench --memory 4M --wss 16M --seconds 6 --ceiling-seconds 0.5
swap_bench npot-swap-bench --device "/dev/$(controller znswap-npot)n1" --workload anon-w-rand --memory 4M --wss 16M --seconds 6 --ceiling-seconds 0.5
