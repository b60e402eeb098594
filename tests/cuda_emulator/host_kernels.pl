#!/usr/bin/perl
# host_kernels.pl IN.cu OUT.cpp [HEADER.cuh ...] - a kernel file as C++ for the host (the CUDA
# emulator, cuda_emulator.h): includes emu_device.h first and turns each
# launch kernel<<<cfg>>>(args); into EMU_LAUNCH(kernel, cooperative, (cfg), args);
# where cooperative is 1 for a kernel that meets at __syncthreads: its body
# calls it, or calls a __device__ function that does (directly or through
# other __device__ functions, templates included), in IN.cu or in the
# kernel files' shared headers given after OUT.cpp.
use strict;
use warnings;
my ($in, $out, @headers) = @ARGV;
sub slurp {
    my ($path) = @_;
    open(my $f, '<', $path) or die "host_kernels.pl: $path: $!\n";
    my $text = do { local $/; <$f> };
    close $f;
    return $text;
}
my $src = slurp($in);
# the file in pieces, each starting at a __global__ or __device__ function
# (its template line included) and running up to the next one
my (%kernel, %device);
my @parts = map { split /(?=^(?:template\s*<[^>]*>\s*)?__(?:global|device)__)/m, $_ } $src, map { slurp($_) } @headers;
for my $p (@parts) {
    my ($body) = split /extern\s+"C"/, $p; # up to the next launcher
    if ($p =~ /^(?:template\s*<[^>]*>\s*)?__global__\s+void\s+(\w+)\s*\(/) {
        $kernel{$1} = $body;
    } elsif ($p =~ /^(?:template\s*<[^>]*>\s*)?__device__[^(;{]*?(\w+)\s*\(/) {
        $device{$1} = $body;
    }
}
# the __device__ functions that reach __syncthreads, to a fixed point
my %sync;
for (my $grew = 1; $grew;) {
    $grew = 0;
    for my $name (keys %device) {
        next if $sync{$name};
        my $b = $device{$name};
        if ($b =~ /__syncthreads/ || grep { $b =~ /\b\Q$_\E\s*[<(]/ } keys %sync) {
            $sync{$name} = 1;
            $grew = 1;
        }
    }
}
my %coop;
for my $name (keys %kernel) {
    my $b = $kernel{$name};
    $coop{$name} = 1 if $b =~ /__syncthreads/ || grep { $b =~ /\b\Q$_\E\s*[<(]/ } keys %sync;
}
my $n = 0;
$src =~ s{(\w+)<<<(.*?)>>>\s*\((.*?)\)\s*;}{$n++; "EMU_LAUNCH($1, " . ($coop{$1} ? 1 : 0) . ", ($2), $3);"}gse;
die "host_kernels.pl: no launch found in $in\n" unless $n;
die "host_kernels.pl: a launch left in $in\n" if $src =~ /<<</;
open(my $o, '>', $out) or die "host_kernels.pl: $out: $!\n";
print $o "/* generated from $in by host_kernels.pl: do not edit */\n#include \"emu_device.h\"\n#line 1 \"$in\"\n$src";
close $o;
print STDERR "host_kernels.pl: $n launches, cooperative: ", join(' ', sort keys %coop), "\n" if $ENV{VERBOSE};
