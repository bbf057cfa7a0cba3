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
    sed "s/^/# $name: /" /tmp/out
    echo "ZNSWAP-RESULT $name $verdict"
}

# device_tests NAME PATH: the conformance suite and a short bench on one device.
device_tests() {
    run_test "$1-conformance" znswap device check --path "$2"
    run_test "$1-bench" znswap device bench --path "$2" --seconds 1 --bytes 16M
}

device_tests nullb0-zbd /dev/nullb0
for serial in zns md16 npot; do
    ctrl=$(controller "znswap-$serial")
    device_tests "$serial-zbd" "/dev/${ctrl}n1"
done
