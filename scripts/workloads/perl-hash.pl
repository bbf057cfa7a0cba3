# Any-command workload (scripts/run-compare.py): perl builds a hash of 800k 100-byte
# values (about 150 MiB in perl's layout, scattered over its heap), then reads every
# value back in key order and prints a checksum, which must agree between the sides.
#   sudo scripts/run-compare.py --memory 64M -- perl scripts/workloads/perl-hash.pl
use strict;
use warnings;

my $count = $ARGV[0] // 800_000;
my %values;
$values{$_} = ('x' x 99) . ($_ % 10) for 1 .. $count;
my $sum = 0;
$sum += substr($values{$_}, 99, 1) for 1 .. $count;
print "$count values, digit sum $sum\n";
