#!/usr/bin/perl
# host_kernels.pl IN.cu OUT.cpp - kernels.cu as C++ for the host (the CUDA
# emulator, cuda_emulator.h): includes emu_device.h first and turns each
# launch kernel<<<cfg>>>(args); into EMU_LAUNCH(kernel, cooperative, (cfg), args);
# where cooperative is 1 for a kernel whose body calls __syncthreads.
use strict;
use warnings;
my ($in, $out) = @ARGV;
open(my $f, '<', $in) or die "host_kernels.pl: $in: $!\n";
my $src = do { local $/; <$f> };
close $f;
my %coop;
my @parts = split /(?=__global__\s+void\s+\w+\s*\()/, $src;
for my $p (@parts) {
    next unless $p =~ /^__global__\s+void\s+(\w+)/;
    my $name = $1;
    my ($body) = split /extern\s+"C"/, $p; # up to the next launcher
    $coop{$name} = 1 if $body =~ /__syncthreads/;
}
my $n = 0;
$src =~ s{(\w+)<<<(.*?)>>>\s*\((.*?)\)\s*;}{$n++; "EMU_LAUNCH($1, " . ($coop{$1} ? 1 : 0) . ", ($2), $3);"}gse;
die "host_kernels.pl: no launch found in $in\n" unless $n;
die "host_kernels.pl: a launch left in $in\n" if $src =~ /<<</;
open(my $o, '>', $out) or die "host_kernels.pl: $out: $!\n";
print $o "/* generated from $in by host_kernels.pl: do not edit */\n#include \"emu_device.h\"\n#line 1 \"$in\"\n$src";
close $o;
print STDERR "host_kernels.pl: $n launches, cooperative: ", join(' ', sort keys %coop), "\n" if $ENV{VERBOSE};
