/* test_cpu.c - the CPU-feature module (cpu.h) and what the metrics say
 * about it: the ISA in use is the best one or the DPTRAIN_ISA cap, never
 * more than the CPU has; names and strings are filled in; the metrics line
 * carries precision, isa, cpu and blas as valid, escaped JSON strings after the
 * existing keys; a bad DPTRAIN_ISA is refused by dp_cpu_init. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/cpu.h"
#include "dptrain/io.h"
#include "testing.h"

int main(void) {
    const char *want = getenv("DPTRAIN_ISA");
    dp_status_t st = dp_cpu_init();
    if (want && want[0])
        CHECK(st == DP_OK ? strcmp(dp_isa_name(dp_cpu_isa()), want) == 0
                          : strstr(dp_error_message(), "DPTRAIN_ISA") != NULL,
              "DPTRAIN_ISA=%s: status %d, isa %s, message '%s'", want, (int)st, dp_isa_name(dp_cpu_isa()),
              dp_error_message());
    else
        CHECK(st == DP_OK && dp_cpu_isa() == dp_cpu_best_isa(), "default: status %d, isa %s, best %s", (int)st,
              dp_isa_name(dp_cpu_isa()), dp_isa_name(dp_cpu_best_isa()));
    CHECK(dp_cpu_isa() <= dp_cpu_best_isa(), "isa %s above the best %s", dp_isa_name(dp_cpu_isa()),
          dp_isa_name(dp_cpu_best_isa()));
#if defined(__x86_64__)
    CHECK(dp_cpu_best_isa() != DP_ISA_NEON, "x86-64 reports neon");
#elif defined(__aarch64__)
    CHECK(dp_cpu_best_isa() == DP_ISA_NEON, "aarch64 without neon: %s", dp_isa_name(dp_cpu_best_isa()));
#endif
    CHECK(strcmp(dp_isa_name(DP_ISA_AVX512), "avx512") == 0 && strcmp(dp_isa_name(DP_ISA_AVX2), "avx2") == 0 &&
              strcmp(dp_isa_name(DP_ISA_NEON), "neon") == 0 && strcmp(dp_isa_name(DP_ISA_GENERIC), "generic") == 0 &&
              strcmp(dp_isa_name((dp_isa_t)42), "unknown") == 0,
          "isa names");
    CHECK(dp_cpu_model()[0] != '\0', "empty CPU model");
    CHECK(strncmp(dp_cpu_blas(), "OpenBLAS", 8) == 0 && strstr(dp_cpu_blas(), " kernels"), "blas: '%s'",
          dp_cpu_blas());
    CHECK(strncmp(dp_cpu_summary(), "kernels ", 8) == 0 && strstr(dp_cpu_summary(), dp_isa_name(dp_cpu_isa())) &&
              strstr(dp_cpu_summary(), dp_cpu_model()) && strstr(dp_cpu_summary(), dp_cpu_blas()),
          "summary: '%s'", dp_cpu_summary());

    /* The metrics line: the old keys unchanged, the run's appended. */
    const char *path = testing_tmp_file("cpu_metrics.jsonl");
    dp_epoch_stats_t s = {.epoch = 1, .train_loss = 0.5, .train_acc = 0.8125, .test_acc = 0.75, .epoch_sec = 2.5,
                          .images_per_sec = 24000, .devices = "cpu:0", .num_devices = 1, .num_ranks = 1, .lr = 0.05};
    dp_run_info_t run = {.isa = "avx2", .cpu = "Model \"X\" 3\\GHz", .blas = "OpenBLAS 0.3.21, Haswell kernels",
                         .precision = "bf16", .layout = "nhwc", .sync = "mpi-overlap"};
    CHECK(dp_metrics_append_run(path, &s, &run) == DP_OK, "append: %s", dp_error_message());
    dp_run_info_t partial = {.isa = "generic"};
    CHECK(dp_metrics_append_run(path, &s, &partial) == DP_OK, "append partial: %s", dp_error_message());
    FILE *f = fopen(path, "r");
    char line[2][1024] = {"", ""};
    CHECK(f && fgets(line[0], sizeof line[0], f) && fgets(line[1], sizeof line[1], f), "read %s", path);
    if (f) fclose(f);
    const char *expected =
        "{\"epoch\": 1, \"train_loss\": 0.5, \"train_acc\": 0.8125, \"test_acc\": 0.75, "
        "\"epoch_sec\": 2.5, \"images_per_sec\": 24000, \"lr\": 0.05, \"devices\": [\"cpu:0\"], "
        "\"num_devices\": 1, \"ranks\": 1, \"precision\": \"bf16\", \"layout\": \"nhwc\", \"sync\": \"mpi-overlap\", "
        "\"isa\": \"avx2\", "
        "\"cpu\": \"Model \\\"X\\\" 3\\\\GHz\", "
        "\"blas\": \"OpenBLAS 0.3.21, Haswell kernels\"}\n";
    CHECK(strcmp(line[0], expected) == 0, "line:\n%s\nexpected:\n%s", line[0], expected);
    CHECK(strstr(line[1], "\"ranks\": 1, \"isa\": \"generic\"}\n") != NULL, "partial run info: %s", line[1]);
    remove(path);
    printf("%s\n", dp_cpu_summary());
    return testing_finish("test_cpu");
}
