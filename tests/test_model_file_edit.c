/* test_model_file_edit.c - dp_model_file_set_outputs and
 * dp_model_file_set_input_size (model_file.h): a model file's last
 * [linear] layer given N outputs, its [net] another height and width.
 * - only the `out` line of the last linear block changes (its key after
 *   another, spaced otherwise, a comment beside), every other byte kept,
 *   with LF and with CRLF line ends; the text builds a model of N outputs;
 * - models/resnet50-imagenet.cfg with 5 outputs: 5 outputs, parameters
 *   2048 x 995 fewer than with 1000;
 * - models/squeezenet1_1-imagenet.cfg (no [linear]: its head is the conv
 *   classifier.1) with 5 outputs: only that block's `filters` line
 *   changes, 5 outputs, parameters 512 x 995 + 995 fewer;
 * - refused in one line: no linear or conv layer, N of 0, a text the reader
 *   refuses (its own "FILE:LINE:" message);
 * - the input size: only [net]'s height and width lines change (width
 *   given before height, a comment beside); ResNet-18 at 64 x 48 builds
 *   with the same parameters; a size of 0 refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/model_file.h"
#include "testing.h"

static const char *const lf =
    "[net]\n"
    "channels = 1\n"
    "height = 8\n"
    "width = 8\n"
    "[flatten]\n"
    "[linear]\n"
    "name = fc1\n"
    "out = 10\n"
    "# the head\n"
    "[linear]\n"
    "name = head\n"
    "bias = 1\n"
    "out   =   7\n"
    "\n";

/* text with "out   =   7" made "out = N" */
static void expect(const char *text, const char *want_line, const char *got, size_t got_len) {
    const char *at = strstr(text, "out   =   7");
    DP_ASSERT(at);
    size_t before = (size_t)(at - text), old = strlen("out   =   7"), line = strlen(want_line);
    size_t want_len = strlen(text) - old + line;
    int same = got_len == want_len && memcmp(got, text, before) == 0 && memcmp(got + before, want_line, line) == 0 &&
               strcmp(got + before + line, at + old) == 0;
    CHECK(same, "the text changed elsewhere or not at the head:\n%s", got);
}

static void check_text(const char *text, const char *what) {
    char *out = NULL;
    size_t len = 0;
    CHECK(dp_model_file_set_outputs(text, strlen(text), what, 3, &out, &len) == DP_OK, "%s: %s", what,
          dp_error_message());
    if (!out) return;
    expect(text, "out = 3", out, len);
    dp_model_t *m = NULL;
    CHECK(dp_model_parse(out, len, what, &m) == DP_OK && dp_model_num_outputs(m) == 3, "%s: %s", what,
          dp_error_message());
    dp_model_free(m);
    free(out);
}

int main(void) {
    check_text(lf, "LF");
    /* the same with CRLF line ends */
    char crlf[1024];
    size_t n = 0;
    for (const char *p = lf; *p; p++) {
        if (*p == '\n') crlf[n++] = '\r';
        crlf[n++] = *p;
    }
    crlf[n] = '\0';
    check_text(crlf, "CRLF");

    /* torchvision's ResNet-50 with 5 classes */
    dp_model_t *whole = NULL, *five = NULL;
    const char *path = testing_path("../models/resnet50-imagenet.cfg");
    DP_ASSERT(dp_model_load_file(path, &whole) == DP_OK);
    size_t len;
    const char *text = dp_model_source(whole, &len);
    char *out = NULL;
    size_t out_len = 0;
    CHECK(dp_model_file_set_outputs(text, len, path, 5, &out, &out_len) == DP_OK, "%s", dp_error_message());
    CHECK(out && dp_model_parse(out, out_len, path, &five) == DP_OK, "%s", dp_error_message());
    if (five)
        CHECK(dp_model_num_outputs(five) == 5 && dp_model_num_params(whole) - dp_model_num_params(five) == 2048u * 995 + 995,
              "resnet50 with 5 outputs: %d outputs, %zu parameters against %zu", dp_model_num_outputs(five),
              dp_model_num_params(five), dp_model_num_params(whole));
    free(out);
    dp_model_free(five);
    dp_model_free(whole);

    /* SqueezeNet 1.1: no linear layer, the head is the last conv */
    path = testing_path("../models/squeezenet1_1-imagenet.cfg");
    whole = five = NULL;
    DP_ASSERT(dp_model_load_file(path, &whole) == DP_OK);
    text = dp_model_source(whole, &len);
    out = NULL;
    CHECK(dp_model_file_set_outputs(text, len, path, 5, &out, &out_len) == DP_OK, "%s", dp_error_message());
    const char *now = "name = classifier.1\nfilters = 5\n", *was = "name = classifier.1\nfilters = 1000\n";
    const char *head = out ? strstr(out, now) : NULL, *old_head = strstr(text, was);
    CHECK(head && old_head && out_len == len - 3 && head - out == old_head - text &&
              strncmp(out, text, (size_t)(head - out)) == 0 && strcmp(head + strlen(now), old_head + strlen(was)) == 0,
          "squeezenet1_1 with 5 classes: more changed than classifier.1's filters");
    CHECK(out && dp_model_parse(out, out_len, path, &five) == DP_OK, "%s", dp_error_message());
    if (five)
        CHECK(dp_model_num_outputs(five) == 5 &&
                  dp_model_num_params(whole) - dp_model_num_params(five) == 512u * 995 + 995,
              "squeezenet1_1 with 5 outputs: %d outputs, %zu parameters against %zu", dp_model_num_outputs(five),
              dp_model_num_params(five), dp_model_num_params(whole));
    free(out);
    dp_model_free(five);
    dp_model_free(whole);

    /* refused */
    const char *nohead = "[net]\nchannels = 1\nheight = 8\nwidth = 8\n[flatten]\n";
    out = NULL;
    CHECK(dp_model_file_set_outputs(nohead, strlen(nohead), "nohead.cfg", 3, &out, &out_len) == DP_ERR_ARG && !out &&
              strstr(dp_error_message(), "nohead.cfg: no [linear] or [conv] layer"),
          "no linear layer: %s", dp_error_message());
    CHECK(dp_model_file_set_outputs(lf, strlen(lf), "lf.cfg", 0, &out, &out_len) == DP_ERR_ARG && !out,
          "0 outputs: %s", dp_error_message());
    const char *bad = "[net]\nchannels = 1\n[linaer]\nout = 3\n";
    CHECK(dp_model_file_set_outputs(bad, strlen(bad), "bad.cfg", 3, &out, &out_len) == DP_ERR_FORMAT && !out &&
              strstr(dp_error_message(), "bad.cfg:3:"),
          "a text the reader refuses: %s", dp_error_message());

    /* the input size */
    const char *net = "[net]\nwidth = 8   # w\nchannels = 1\nheight = 8\n[conv]\nname = c\nfilters = 2\nsize = 3\n"
                      "[global_avgpool]\n[linear]\nname = fc\nout = 4\n";
    out = NULL;
    CHECK(dp_model_file_set_input_size(net, strlen(net), "net.cfg", 20, 30, &out, &out_len) == DP_OK, "%s",
          dp_error_message());
    const char *want = "[net]\nwidth = 30\nchannels = 1\nheight = 20\n[conv]\nname = c\nfilters = 2\nsize = 3\n"
                       "[global_avgpool]\n[linear]\nname = fc\nout = 4\n";
    CHECK(out && out_len == strlen(want) && strcmp(out, want) == 0, "the input size: %s", out ? out : "(none)");
    free(out);
    whole = five = NULL;
    path = testing_path("../models/resnet18-imagenet.cfg");
    DP_ASSERT(dp_model_load_file(path, &whole) == DP_OK);
    text = dp_model_source(whole, &len);
    out = NULL;
    CHECK(dp_model_file_set_input_size(text, len, path, 64, 48, &out, &out_len) == DP_OK &&
              dp_model_parse(out, out_len, path, &five) == DP_OK,
          "%s", dp_error_message());
    int c = 0, h = 0, w = 0;
    if (five) dp_model_input_shape(five, &c, &h, &w);
    CHECK(five && c == 3 && h == 64 && w == 48 && dp_model_num_params(five) == dp_model_num_params(whole),
          "resnet18 at 64 x 48: %dx%dx%d", c, h, w);
    free(out);
    dp_model_free(five);
    dp_model_free(whole);
    out = NULL;
    CHECK(dp_model_file_set_input_size(net, strlen(net), "net.cfg", 0, 30, &out, &out_len) == DP_ERR_ARG && !out,
          "a height of 0: %s", dp_error_message());
    return testing_finish("test_model_file_edit");
}
