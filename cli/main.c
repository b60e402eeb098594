/* main.c - the `dptrain` command: dispatches to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "dptrain/cpu.h"
#include "dptrain/status.h"

static const char usage[] =
    "usage: dptrain <command> [options]\n"
    "\n"
    "Data-parallel training of convolutional networks (Dive into Deep Learning 12.5,\n"
    "PaddlePaddle's multi-device training), in C.\n"
    "\n"
    "commands:\n"
    "  train      train a network on Fashion-MNIST, IDX files, an image folder or CIFAR-10\n"
    "  launch     run `train` as N processes with mpirun, one log per process\n"
    "  eval       test accuracy of a checkpoint (`train --save FILE`)\n"
    "  inspect    print a checkpoint's metadata and tensors (names, shapes, sums)\n"
    "  predict    classify JPEG/PNG/PGM/PPM/BMP images with a checkpoint\n"
    "  export     write a checkpoint's model as ONNX (--onnx FILE)\n"
    "  help       show this help; `dptrain help COMMAND` (or `dptrain COMMAND --help`)\n"
    "             shows a command's options\n"
    "  version    print the version, the CPU, the kernels' ISA and the BLAS\n"
    "\n"
    "example:\n"
    "  dptrain train --model lenet --epochs 10 --batch-size 256 --lr 0.2\n"
    "\n"
    "SIMD kernels are chosen for the CPU at start-up (avx512, avx2, neon or generic);\n"
    "DPTRAIN_ISA=NAME caps the choice. `dptrain version` says what runs.\n";

static int run_command(int argc, char **argv);

/* `dptrain help COMMAND`: the command's own help (`dptrain COMMAND --help`). */
static int help_command(int argc, char **argv) {
    if (argc < 3) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc > 3 || strcmp(argv[2], "help") == 0 || strcmp(argv[2], "version") == 0) {
        fprintf(stderr, "dptrain: help: %s (give one command: train, launch, eval, inspect, predict or export)\n",
                argc > 3 ? "too many arguments" : "no options for this command");
        return 2;
    }
    char *help_argv[] = {argv[0], argv[2], "--help", NULL};
    return run_command(3, help_argv);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    if (dp_cpu_init() != DP_OK) return cli_report_error(); /* a bad DPTRAIN_ISA */
    return run_command(argc, argv);
}

static int run_command(int argc, char **argv) {
    const char *command = argv[1];
    if (strcmp(command, "train") == 0) return cmd_train(argc, argv);
    if (strcmp(command, "launch") == 0) return cmd_launch(argc, argv);
    if (strcmp(command, "eval") == 0) return cmd_eval(argc, argv);
    if (strcmp(command, "inspect") == 0) return cmd_inspect(argc, argv);
    if (strcmp(command, "predict") == 0) return cmd_predict(argc, argv);
    if (strcmp(command, "export") == 0) return cmd_export(argc, argv);
    if (strcmp(command, "help") == 0) return help_command(argc, argv);
    if (strcmp(command, "--help") == 0 || strcmp(command, "-h") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    if (strcmp(command, "version") == 0 || strcmp(command, "--version") == 0) {
        printf("dptrain %s\ncpu: %s\nisa: %s\nbest isa: %s\nblas: %s\n", DPTRAIN_VERSION, dp_cpu_model(),
               dp_isa_name(dp_cpu_isa()), dp_isa_name(dp_cpu_best_isa()), dp_cpu_blas());
        return 0;
    }
    fprintf(stderr, "dptrain: unknown command '%s' (commands: train, launch, eval, inspect, predict, export, help, version)\n", command);
    return 2;
}
