/* test_model_file.c - the model-file parser (model_file.h): a table of valid
 * snippets with the parameter table each must build, a table of broken
 * snippets with the exact one-line message each must give (line numbers
 * included), the shipped models (each identical to its built-in; alexnet,
 * resnet18 and the *-imagenet.cfg with PyTorch's parameter counts),
 * the initialisation kinds, file
 * errors, and a few thousand mutated files that must fail cleanly or parse. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/autograd.h"
#include "dptrain/model_file.h"
#include "dptrain/rng.h"
#include "testing.h"

/* Lines 1-4 of most snippets: layers start on line 5. */
#define NET "[net]\nchannels = 1\nheight = 8\nwidth = 8\n"
#define HEAD "[flatten]\n[linear]\nname = head\nout = 3\n"

/* "name AxB, name C, ... -> outputs" */
static void describe(const dp_model_t *m, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < dp_model_num_param_tensors(m); i++) {
        const dp_param_info_t *p = dp_model_param(m, i);
        used += (size_t)snprintf(out + used, size - used, "%s%s ", i ? ", " : "", p->name);
        for (int d = 0; d < p->ndim; d++)
            used += (size_t)snprintf(out + used, size - used, "%s%d", d ? "x" : "", p->shape[d]);
        if (used >= size) return;
    }
    snprintf(out + used, size - used, " -> %d", dp_model_num_outputs(m));
}

typedef struct {
    const char *what;
    const char *text;
    const char *params; /* describe() of the model */
} valid_case_t;

static const valid_case_t valid_cases[] = {
    {"minimal", NET HEAD, "head.weight 3x64, head.bias 3 -> 3"},
    {"comments, blanks, tabs, CRLF, spaces around '=' and brackets, UTF-8 in a comment",
     "# a model\r\n\r\n  [ net ]   # the input\r\n\tchannels=1\r\nheight =8\r\n width\t= 8 # \xc3\xa9\r\n"
     "[flatten]\n\n[linear]\nname=head\nout=3",
     "head.weight 3x64, head.bias 3 -> 3"},
    {"conv: size_h/size_w, stride_w, pad, groups, bias = 0, activation; W (8+2-1)/2+1 = 5",
     "[net]\nchannels = 2\nheight = 8\nwidth = 8\n"
     "[conv]\nname = c\nfilters = 4\nsize_h = 3\nsize_w = 1\nstride_w = 2\npad = 1\ngroups = 2\nbias = 0\n"
     "activation = relu\n" HEAD,
     "c.weight 4x1x3x1, head.weight 3x160, head.bias 3 -> 3"},
    {"conv: dilation 2 (8 - 2*2 = 4), linear bias = 0",
     NET "[conv]\nname = c\nfilters = 2\nsize = 3\ndilation = 2\n[flatten]\n[linear]\nname = head\nout = 3\nbias = 0\n",
     "c.weight 2x1x3x3, c.bias 2, head.weight 3x32 -> 3"},
    {"pools: stride defaults to size, padding, count_include_pad",
     NET "[maxpool]\nsize = 2\n[avgpool]\nsize = 3\nstride = 1\npad = 1\ncount_include_pad = 0\n" HEAD,
     "head.weight 3x16, head.bias 3 -> 3"},
    {"maxpool ceil_mode: 8 -> 4 with size 3, stride 2 (floor: 3)",
     NET "[maxpool]\nsize = 3\nstride = 2\nceil_mode = 1\n" HEAD, "head.weight 3x16, head.bias 3 -> 3"},
    {"maxpool ceil_mode, size 2, pad 1: 5x7 -> 3x4 (the rounded-up last window would start in the padding)",
     "[net]\nchannels = 1\nheight = 5\nwidth = 7\n[maxpool]\nsize = 2\npad = 1\nceil_mode = 1\n" HEAD,
     "head.weight 3x12, head.bias 3 -> 3"},
    {"maxpool ceil_mode = 0 is floor", NET "[maxpool]\nsize = 3\nstride = 2\nceil_mode = 0\n" HEAD,
     "head.weight 3x9, head.bias 3 -> 3"},
    {"pool: rectangular window", NET "[avgpool]\nsize_h = 2\nsize_w = 4\n" HEAD, "head.weight 3x8, head.bias 3 -> 3"},
    {"labels and names may hold '.', '-', '_'", NET "[relu]\nlabel = a.b-c_d\n" HEAD,
     "head.weight 3x64, head.bias 3 -> 3"},
    {"model name and torch init", "[net]\nname = my-net\ninit = torch\nchannels = 1\nheight = 8\nwidth = 8\n" HEAD,
     "head.weight 3x64, head.bias 3 -> 3"},
    {"no newline at the end", NET "[flatten]\n[linear]\nname = head\nout = 3", "head.weight 3x64, head.bias 3 -> 3"},
    {"relu6 block, activation = relu6, init = kaiming_fan_out, a layer's own init and init_scale",
     "[net]\ninit = kaiming_fan_out\nchannels = 2\nheight = 8\nwidth = 8\n"
     "[conv]\nname = dw\nfilters = 2\nsize = 3\npad = 1\ngroups = 2\nbias = 0\nactivation = relu6\n[relu6]\n"
     "[flatten]\n[linear]\nname = head\nout = 3\ninit = normal\ninit_scale = 0.5\n"
     "[linear]\nname = head2\nout = 3\ninit = torch\n",
     "dw.weight 2x1x3x3, head.weight 3x128, head.bias 3, head2.weight 3x3, head2.bias 3 -> 3"},
};

/* Layers of the operator family beyond LeNet's (batch norm, dropout,
 * transposed conv, routes, ...; nn.c's builder functions). */
static const valid_case_t valid_graph_cases[] = {
    {"batchnorm, dropout, sigmoid, tanh",
     NET "[conv]\nname = c\nfilters = 2\nsize = 3\n[batchnorm]\nname = bn\neps = 1e-3\nmomentum = 0.2\n"
         "[sigmoid]\n[tanh]\n[flatten]\n[dropout]\np = 0.25\n[linear]\nname = head\nout = 3\n",
     "c.weight 2x1x3x3, c.bias 2, bn.weight 2, bn.bias 2, bn.running_mean 2, bn.running_var 2, "
     "head.weight 3x72, head.bias 3 -> 3"},
    {"conv activation = tanh, linear activation = sigmoid, global_avgpool",
     NET "[conv]\nname = c\nfilters = 5\nsize = 3\nactivation = tanh\n[global_avgpool]\n[flatten]\n"
         "[linear]\nname = head\nout = 3\nactivation = sigmoid\n",
     "c.weight 5x1x3x3, c.bias 5, head.weight 3x5, head.bias 3 -> 3"},
    {"conv_transpose: (8-1)*2 - 2 + 3 + 1 = 16",
     NET "[conv_transpose]\nname = up\nfilters = 2\nsize = 3\nstride = 2\npad = 1\noutput_padding = 1\n"
         "[avgpool]\nsize = 4\n" HEAD,
     "up.weight 1x2x3x3, up.bias 2, head.weight 3x32, head.bias 3 -> 3"},
    {"route by label reads the input: the second conv sees 1 channel",
     NET "[conv]\nname = a\nfilters = 4\nsize = 1\n[route]\nfrom = input\n[conv]\nname = b\nfilters = 2\nsize = 1\n" HEAD,
     "a.weight 4x1x1x1, a.bias 4, b.weight 2x1x1x1, b.bias 2, head.weight 3x128, head.bias 3 -> 3"},
    {"route by relative offset -2 reads conv a (4 channels), not the pool",
     NET "[conv]\nname = a\nfilters = 4\nsize = 1\n[maxpool]\nsize = 2\n[route]\nfrom = -2\n"
         "[conv]\nname = b\nfilters = 2\nsize = 1\n" HEAD,
     "a.weight 4x1x1x1, a.bias 4, b.weight 2x4x1x1, b.bias 2, head.weight 3x128, head.bias 3 -> 3"},
    {"residual by label and by offset, with and without relu",
     NET "[conv]\nname = a\nfilters = 2\nsize = 3\npad = 1\nlabel = block_in\n[conv]\nname = b\nfilters = 2\nsize = 3\n"
         "pad = 1\n[residual]\nfrom = block_in\nrelu = 1\n[residual]\nfrom = -3\n" HEAD,
     "a.weight 2x1x3x3, a.bias 2, b.weight 2x2x3x3, b.bias 2, head.weight 3x128, head.bias 3 -> 3"},
    {"concat by label (4 + 3 channels) and with the input (1 + 7)",
     NET "[conv]\nname = a\nfilters = 4\nsize = 1\nlabel = x\n[conv]\nname = b\nfilters = 3\nsize = 1\n[concat]\nfrom = x\n"
         "[conv]\nname = c\nfilters = 7\nsize = 1\n[concat]\nfrom = input\n[conv]\nname = d\nfilters = 2\nsize = 1\n" HEAD,
     "a.weight 4x1x1x1, a.bias 4, b.weight 3x4x1x1, b.bias 3, c.weight 7x7x1x1, c.bias 7, d.weight 2x8x1x1, d.bias 2, "
     "head.weight 3x128, head.bias 3 -> 3"},
    {"squeeze-excitation: hardswish, hardsigmoid blocks and keys, scale_channels by label and by offset",
     NET "[conv]\nname = a\nfilters = 4\nsize = 3\npad = 1\nactivation = hardswish\nlabel = se_in\n"
         "[global_avgpool]\n[conv]\nname = fc1\nfilters = 2\nsize = 1\nactivation = relu\n"
         "[conv]\nname = fc2\nfilters = 4\nsize = 1\nactivation = hardsigmoid\n[scale_channels]\nfrom = se_in\n"
         "[hardswish]\n[global_avgpool]\n[hardsigmoid]\n[scale_channels]\nfrom = -3\n" HEAD,
     "a.weight 4x1x3x3, a.bias 4, fc1.weight 2x4x1x1, fc1.bias 2, fc2.weight 4x2x1x1, fc2.bias 4, "
     "head.weight 3x256, head.bias 3 -> 3"},
    {"ConvNeXt: layernorm blocks (eps given and default), a gelu block and key",
     NET "[conv]\nname = stem\nfilters = 4\nsize = 4\nstride = 4\n[layernorm]\nname = stem_norm\neps = 1e-6\n"
         "[conv]\nname = pw\nfilters = 8\nsize = 1\nactivation = gelu\n[gelu]\n[layernorm]\nname = n2\n" HEAD,
     "stem.weight 4x1x4x4, stem.bias 4, stem_norm.weight 4, stem_norm.bias 4, pw.weight 8x4x1x1, pw.bias 8, "
     "n2.weight 8, n2.bias 8, head.weight 3x32, head.bias 3 -> 3"},
    {"ConvNeXt block: 1x1 convolutions with linear-shaped weights, a layer scale (its tensor first), the residual",
     NET "[conv]\nname = b.0\nfilters = 1\nsize = 3\npad = 1\ngroups = 1\nlabel = in\n[layernorm]\nname = b.2\n"
         "[conv]\nname = b.3\nfilters = 4\nsize = 1\nweight_shape = linear\nactivation = gelu\n"
         "[conv]\nname = b.5\nfilters = 1\nsize = 1\nweight_shape = linear\n[layer_scale]\nname = b\n"
         "[residual]\nfrom = in\n[conv]\nname = plain\nfilters = 2\nsize = 1\nweight_shape = conv\n" HEAD,
     "b.layer_scale 1x1x1, b.0.weight 1x1x3x3, b.0.bias 1, b.2.weight 1, b.2.bias 1, b.3.weight 4x1, b.3.bias 4, "
     "b.5.weight 1x4, b.5.bias 1, plain.weight 2x1x1x1, plain.bias 2, head.weight 3x128, head.bias 3 -> 3"},
    {"drop_path before a residual (stochastic depth)",
     NET "[conv]\nname = a\nfilters = 2\nsize = 3\npad = 1\nlabel = block_in\n[conv]\nname = b\nfilters = 2\n"
         "size = 3\npad = 1\n[drop_path]\np = 0.2\n[residual]\nfrom = block_in\n" HEAD,
     "a.weight 2x1x3x3, a.bias 2, b.weight 2x2x3x3, b.bias 2, head.weight 3x128, head.bias 3 -> 3"},
    {"silu block and activation = silu (EfficientNet's)",
     NET "[conv]\nname = a\nfilters = 2\nsize = 3\npad = 1\nactivation = silu\n[silu]\n" HEAD,
     "a.weight 2x1x3x3, a.bias 2, head.weight 3x128, head.bias 3 -> 3"},
};

typedef struct {
    const char *what;
    const char *text;
    size_t len; /* 0: strlen(text) */
    const char *message; /* exact; ending in '*': a prefix */
} broken_case_t;

#define LONG_100 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
#define LONG_1000 LONG_100 LONG_100 LONG_100 LONG_100 LONG_100 LONG_100 LONG_100 LONG_100 LONG_100 LONG_100

static const broken_case_t broken_cases[] = {
    {"empty", "", 0, "t.cfg:1: empty file (a model file starts with [net])"},
    {"only comments", "# nothing\n\n   # here\n", 0, "t.cfg:3: no [net] block (the file has no blocks)"},
    {"no layers", NET, 0, "t.cfg:4: no layers after [net]"},
    {"first block not net", "[conv]\nname = c\n", 0, "t.cfg:1: the first block must be [net], found [conv]"},
    {"key outside a block", "filters = 3\n[net]\n", 0,
     "t.cfg:1: 'filters = 3' is outside a block (a model file starts with [net])"},
    {"second net", NET "[net]\n", 0, "t.cfg:5: a second [net] block (the one [net] block is on line 1)"},
    {"unknown layer type", NET "\n[convolution]\n", 0,
     "t.cfg:6: unknown layer type [convolution] (expected net, conv, conv_transpose, maxpool, avgpool, "
     "global_avgpool, batchnorm, dropout, relu, relu6, sigmoid, tanh, flatten, linear, route, residual, "
     "hardswish, hardsigmoid, scale_channels, gelu, layernorm, layer_scale, silu, drop_path or concat)"},
    {"unclosed header", NET "[conv\n", 0, "t.cfg:5: expected a block header like [conv], found '[conv'"},
    {"unknown key", NET "[relu]\nsize = 2\n", 0, "t.cfg:6: unknown key 'size' for [relu] (expected one of: label)"},
    {"ceil_mode is a key of maxpool only", NET "[avgpool]\nsize = 2\nceil_mode = 1\n", 0,
     "t.cfg:7: unknown key 'ceil_mode' for [avgpool] (expected one of: size size_h size_w stride stride_h stride_w pad "
     "pad_h pad_w label count_include_pad)"},
    {"ceil_mode is a flag", NET "[maxpool]\nsize = 2\nceil_mode = 2\n" HEAD, 0,
     "t.cfg:7: ceil_mode = 2: expected 0 or 1"},
    {"unknown key in net", "[net]\nchannel = 1\n", 0,
     "t.cfg:2: unknown key 'channel' for [net] (expected one of: channels height width init init_scale name)"},
    {"no '='", NET "[conv]\nfilters 3\n", 0, "t.cfg:6: expected key = value or [type], found 'filters 3'"},
    {"no key", NET "[conv]\n = 3\n", 0, "t.cfg:6: '= 3' has no key"},
    {"no value", NET "[conv]\nfilters =   # later\n", 0, "t.cfg:6: filters has no value"},
    {"duplicate key", NET "[conv]\nname = c\nfilters = 3\n\nfilters = 4\n", 0,
     "t.cfg:9: duplicate key 'filters' (first given on line 7)"},
    {"missing key", NET "[conv]\nname = c\nsize = 3\n" HEAD, 0, "t.cfg:5: [conv] needs filters"},
    {"missing key in net", "[net]\nchannels = 1\nwidth = 8\n" HEAD, 0, "t.cfg:1: [net] needs height"},
    {"missing size", NET "[conv]\nname = c\nfilters = 3\n" HEAD, 0,
     "t.cfg:5: [conv] needs size (or size_h and size_w)"},
    {"size_h without size_w", NET "[maxpool]\nsize_h = 2\n" HEAD, 0, "t.cfg:6: size_h given without size_w"},
    {"size and size_w", NET "[maxpool]\nsize = 2\nsize_w = 2\n" HEAD, 0,
     "t.cfg:7: size and size_w both given (line 6): give size, or size_h and size_w"},
    {"not a number", NET "[conv]\nname = c\nfilters = abc\nsize = 3\n" HEAD, 0, "t.cfg:7: filters = abc is not an integer"},
    {"a fraction for an integer", NET "[conv]\nname = c\nfilters = 3.5\nsize = 3\n" HEAD, 0,
     "t.cfg:7: filters = 3.5 is not an integer"},
    {"negative", NET "[conv]\nname = c\nfilters = -3\nsize = 3\n" HEAD, 0,
     "t.cfg:7: filters = -3 is out of range (expected 1 to 65536)"},
    {"overflow", NET "[conv]\nname = c\nfilters = 99999999999999999999999999\nsize = 3\n" HEAD, 0,
     "t.cfg:7: filters = 99999999999999999999999999 is out of range (expected 1 to 65536)"},
    {"zero stride", NET "[maxpool]\nsize = 2\nstride = 0\n" HEAD, 0,
     "t.cfg:7: stride = 0 is out of range (expected 1 to 1024)"},
    {"input too large", "[net]\nchannels = 65536\nheight = 65536\nwidth = 2\n" HEAD, 0,
     "t.cfg:1: input 65536x65536x2 has more than 268435456 values"},
    {"float out of range", NET "[dropout]\np = 1\n" HEAD, 0, "t.cfg:6: p = 1 is out of range (expected 0 to 1, exclusive)"},
    {"float overflow", NET "[batchnorm]\nname = bn\neps = 1e999\n" HEAD, 0,
     "t.cfg:7: eps = 1e999 is out of range (expected 1e-12 to 1)"},
    {"not a float", NET "[dropout]\np = nan\n" HEAD, 0, "t.cfg:6: p = nan is not a number"},
    {"drop_path without p", NET "[drop_path]\n" HEAD, 0, "t.cfg:5: [drop_path] needs p*"},
    {"drop_path p = 1", NET "[drop_path]\np = 1\n" HEAD, 0, "t.cfg:6: p = 1 is out of range*"},
    {"hex float", NET "[dropout]\np = 0x1p-2\n" HEAD, 0, "t.cfg:6: p = 0x1p-2 is not a number"},
    {"bad init", "[net]\nchannels = 1\nheight = 8\nwidth = 8\ninit = xavier\n" HEAD, 0,
     "t.cfg:5: init = xavier: expected normal, torch, kaiming_fan_out, uniform_fan_out, kaiming_fan_out_torch_bias, "
     "kaiming_fan_in, torch_zero_bias or kaiming_uniform"},
    {"bad flag", NET "[conv]\nname = c\nfilters = 2\nsize = 3\nbias = yes\n" HEAD, 0, "t.cfg:9: bias = yes: expected 0 or 1"},
    {"bad activation", NET "[conv]\nname = c\nfilters = 2\nsize = 3\nactivation = swish\n" HEAD, 0,
     "t.cfg:9: activation = swish: expected relu, relu6, sigmoid, tanh, hardswish, hardsigmoid, gelu, silu or linear"},
    {"weight_shape of a 3x3 convolution", NET "[conv]\nname = c\nfilters = 2\nsize = 3\nweight_shape = linear\n" HEAD,
     0, "t.cfg:5: [conv] model t: layer c: a weight stored as a linear layer's needs a 1x1 convolution with stride 1, "
     "no padding and no groups"},
    {"weight_shape unknown", NET "[conv]\nname = c\nfilters = 2\nsize = 1\nweight_shape = flat\n" HEAD, 0,
     "t.cfg:9: weight_shape = flat: expected conv or linear"},
    {"layer_scale without name", NET "[layer_scale]\ninit = 1e-6\n" HEAD, 0, "t.cfg:5: [layer_scale] needs name"},
    {"layernorm without name", NET "[layernorm]\neps = 1e-6\n" HEAD, 0, "t.cfg:5: [layernorm] needs name"},
    {"layernorm eps 0", NET "[layernorm]\nname = n\neps = 0\n" HEAD, 0,
     "t.cfg:7: eps = 0 is out of range (expected 1e-12 to 1)"},
    {"layernorm key of batchnorm", NET "[layernorm]\nname = n\nmomentum = 0.1\n" HEAD, 0,
     "t.cfg:7: unknown key 'momentum' for [layernorm] (expected one of: name eps label)"},
    {"concat of outputs of other heights and widths", NET "[conv]\nname = c\nfilters = 2\nsize = 1\nlabel = x\n"
     "[maxpool]\nsize = 2\n[concat]\nfrom = x\n" HEAD, 0,
     "t.cfg:12: [concat] model t: layer 3: concat joins output 1 (2, 8, 8) and output 2 (2, 4, 4): they must differ "
     "in their channels alone"},
    {"scale_channels by a scale that is not (C, 1, 1)", NET "[conv]\nname = c\nfilters = 2\nsize = 1\nlabel = x\n"
     "[conv]\nname = s\nfilters = 2\nsize = 1\n[scale_channels]\nfrom = x\n" HEAD, 0,
     "t.cfg:14: [scale_channels] model t: layer 3: scale_channels multiplies output 1 (2, 8, 8) by output 2 "
     "(2, 8, 8): expected a scale of (2, 1, 1) for it"},
    {"scale_channels with another channel count", NET "[conv]\nname = c\nfilters = 2\nsize = 1\nlabel = x\n"
     "[global_avgpool]\n[conv]\nname = s\nfilters = 3\nsize = 1\n[scale_channels]\nfrom = x\n" HEAD, 0,
     "t.cfg:15: [scale_channels] model t: layer 4: scale_channels multiplies output 1 (2, 8, 8) by output 3 "
     "(3, 1, 1): expected a scale of (2, 1, 1) for it"},
    {"scale_channels without from", NET "[relu]\n[scale_channels]\n" HEAD, 0, "t.cfg:6: [scale_channels] needs from"},
    {"duplicate parameter name", NET "[conv]\nname = c\nfilters = 2\nsize = 3\n[flatten]\n[linear]\nname = c\nout = 3\n",
     0, "t.cfg:11: name = c is already the name of the layer on line 5"},
    {"bad name", NET "[flatten]\n[linear]\nname = fc 1\nout = 3\n", 0,
     "t.cfg:7: name = fc 1: use letters, digits, '_', '.' and '-' only"},
    {"name too long", NET "[flatten]\n[linear]\nname = n234567890123456789012345678901234567890123456789\nout = 3\n", 0,
     "t.cfg:7: name = n234567890123456789012345678901234567890... is longer than 48 characters"},
    {"duplicate label", NET "[relu]\nlabel = a\n[relu]\nlabel = a\n" HEAD, 0,
     "t.cfg:8: label = a is already the label of the layer on line 5"},
    {"reserved label", NET "[relu]\nlabel = input\n" HEAD, 0,
     "t.cfg:6: label = input is reserved (from = input names the model's input)"},
    {"numeric label", NET "[relu]\nlabel = 2\n" HEAD, 0, "t.cfg:6: label = 2: a label starts with a letter, '_' or '.'"},
    {"route to an unknown label", NET "[relu]\n[route]\nfrom = nowhere\n" HEAD, 0,
     "t.cfg:7: from = nowhere: no layer has that label"},
    {"route to a later layer", NET "[route]\nfrom = later\n[relu]\nlabel = later\n" HEAD, 0,
     "t.cfg:6: from = later: that label is on a later layer (line 8); from must name an earlier layer"},
    {"residual to itself", NET "[relu]\n[residual]\nfrom = me\nlabel = me\n" HEAD, 0,
     "t.cfg:7: from = me: that label is on this layer (line 8); from must name an earlier layer"},
    {"offset before the input", NET "[relu]\n[residual]\nfrom = -3\n" HEAD, 0,
     "t.cfg:7: from = -3 reaches before the input (this is layer 2: -1 to -2 are possible)"},
    {"positive offset", NET "[relu]\n[route]\nfrom = 1\n" HEAD, 0,
     "t.cfg:7: from = 1: expected a negative offset (-1 is the layer before) or a label"},
    {"route last", NET "[relu]\n[route]\nfrom = -1\n", 0,
     "t.cfg:6: [route] cannot be the last layer (the next layer reads what it routes)"},
    {"pool padding over half the window", NET "[maxpool]\nsize = 2\npad = 2\n" HEAD, 0,
     "t.cfg:5: [maxpool] pad 2 must be at most half of size 2 (as in PyTorch)"},
    {"conv does not fit (the builder's message)", NET "[conv]\nname = c\nfilters = 2\nsize = 9\n" HEAD, 0,
     "t.cfg:5: [conv] model t: layer c: *"},
    {"linear without flatten (the builder's message)", NET "\n[linear]\nname = fc\nout = 3\n", 0,
     "t.cfg:6: [linear] model t: layer fc: *"},
    {"ends with an image", NET "[conv]\nname = c\nfilters = 2\nsize = 3\n", 0,
     "t.cfg:5: the network ends with a 3-dim output per example; it must end with a flat vector of class "
     "scores ([flatten], then [linear])"},
    {"line too long", NET "# " LONG_1000 LONG_100 "\n", 0, "t.cfg:5: line is longer than 1024 characters"},
    {"control byte", NET "[re\x01lu]\n", 0, "t.cfg:5: non-text byte 0x01 at column 4"},
    {"NUL byte", NET "[relu]\0\n", sizeof(NET "[relu]\0\n") - 1, "t.cfg:5: non-text byte 0x00 at column 7"},
    {"carriage return inside a line", NET "[relu]\r[relu]\n", 0, "t.cfg:5: non-text byte 0x0d at column 7"},
    {"non-ASCII outside a comment", NET "[relu]\nlabel = caf\xc3\xa9\n", 0,
     "t.cfg:6: non-ASCII byte 0xc3 at column 12 (only comments may hold other text)"},
    {"unknown layer init", NET "[flatten]\n[linear]\nname = head\nout = 3\ninit = kaiming\n", 0,
     "t.cfg:9: init = kaiming: expected normal, torch, kaiming_fan_out, uniform_fan_out, kaiming_fan_out_torch_bias, "
     "kaiming_fan_in, torch_zero_bias or kaiming_uniform"},
    {"init_scale without init = normal in its block",
     NET "[flatten]\n[linear]\nname = head\nout = 3\ninit_scale = 0.1\n", 0, "t.cfg:9: init_scale is the standard deviation of init = normal: give init = normal in this block too"},
    {"init_scale with another init", NET "[conv]\nname = c\nfilters = 2\nsize = 1\ninit = torch\ninit_scale = 1\n" HEAD,
     0, "t.cfg:10: init_scale is the standard deviation of init = normal: give init = normal in this block too"},
    {"init on a layer without weights", NET "[relu6]\ninit = torch\n" HEAD, 0,
     "t.cfg:6: unknown key 'init' for [relu6] (expected one of: label)"},
    {"quoted text is shortened and printable", NET "[" LONG_100 "]\n", 0,
     "t.cfg:5: unknown layer type [xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...] (expected net, conv, conv_transpose, "
     "maxpool, avgpool, global_avgpool, batchnorm, dropout, relu, relu6, sigmoid, tanh, flatten, linear, route, "
     "residual, hardswish, hardsigmoid, scale_channels, gelu, layernorm, layer_scale, silu, drop_path or concat)"},
};

static int message_matches(const char *got, const char *want) {
    size_t n = strlen(want);
    if (n > 0 && want[n - 1] == '*') return strncmp(got, want, n - 1) == 0;
    return strcmp(got, want) == 0;
}

static void check_valid(const valid_case_t *c) {
    dp_model_t *m = NULL;
    dp_status_t status = dp_model_parse(c->text, strlen(c->text), "t.cfg", &m);
    CHECK(status == DP_OK && m, "%s: %s", c->what, dp_error_message());
    if (!m) return;
    char got[1024];
    describe(m, got, sizeof got);
    CHECK(strcmp(got, c->params) == 0, "%s:\n  got  %s\n  want %s", c->what, got, c->params);
    dp_model_free(m);
}

static void test_valid(void) {
    for (size_t i = 0; i < sizeof valid_cases / sizeof valid_cases[0]; i++) check_valid(&valid_cases[i]);
}

static void test_valid_graph_layers(void) {
    for (size_t i = 0; i < sizeof valid_graph_cases / sizeof valid_graph_cases[0]; i++)
        check_valid(&valid_graph_cases[i]);
}

static void test_broken(void) {
    for (size_t i = 0; i < sizeof broken_cases / sizeof broken_cases[0]; i++) {
        const broken_case_t *c = &broken_cases[i];
        size_t len = c->len ? c->len : strlen(c->text);
        dp_model_t *m = (dp_model_t *)&m; /* must be reset to NULL */
        dp_status_t status = dp_model_parse(c->text, len, "t.cfg", &m);
        CHECK(status != DP_OK && m == NULL, "%s: accepted", c->what);
        CHECK(message_matches(dp_error_message(), c->message), "%s:\n  got  %s\n  want %s", c->what,
              dp_error_message(), c->message);
    }
}

/* A model parsed from models/NAME.cfg. */
static dp_model_t *load_shipped(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "../models/%s.cfg", name);
    dp_model_t *m = NULL;
    CHECK(dp_model_load_file(testing_path(rel), &m) == DP_OK, "%s: %s", rel, dp_error_message());
    return m;
}

/* Logits of a model for a fixed random batch, from parameters drawn with `seed`. */
static float *forward_once(const dp_model_t *m, uint64_t seed, float **params_out) {
    size_t np = dp_model_num_params(m);
    float *params = malloc(sizeof(float) * np);
    dp_rng_t rng;
    dp_rng_seed(&rng, seed);
    dp_model_init_params(m, params, &rng);
    int shape[4] = {3, 1, 28, 28};
    float *x = malloc(sizeof(float) * 3 * 784);
    dp_rng_seed(&rng, 1234);
    for (int i = 0; i < 3 * 784; i++) x[i] = (float)dp_rng_uniform(&rng);
    dp_arena_t *arena = dp_arena_new(1 << 20);
    dp_tape_t *tape = dp_tape_new(arena);
    dp_tensor_t *input = dp_tape_tensor(tape, 4, shape), *logits = NULL;
    input->data = x;
    float *out = NULL;
    CHECK(dp_model_forward(m, tape, params, NULL, input, &logits) == DP_OK, "%s forward: %s", dp_model_name(m),
          dp_error_message());
    if (logits && (out = malloc(sizeof(float) * 30))) memcpy(out, logits->data, sizeof(float) * 30);
    dp_tape_free(tape);
    dp_arena_free(arena);
    free(x);
    *params_out = params;
    return out;
}

/* Parameters past which a model's initialisation and forward pass are left
 * out under an emulator (DPTRAIN_EMULATOR: scripts/check_arm64.sh's qemu):
 * alexnet's and resnet18's 17M normal draws, twice, took 40 s of its 2
 * minutes there, and equality of two models run by the same code says
 * nothing of the ISA (the native run checks it; the per-ISA tests check the
 * kernels under qemu). Their parameter tables are still compared there. */
#define EMULATED_MAX_INIT_PARAMS 1000000

/* models/NAME.cfg builds exactly the built-in model NAME: the same parameter
 * table, the same initial parameters for a seed (so the same init kind and
 * scale), the same logits (inference: batch norm's running statistics,
 * no dropout). */
static void test_builtin_equivalence(const char *name) {
    dp_model_t *file = load_shipped(name), *builtin = NULL;
    CHECK(dp_model_builtin(name, &builtin) == DP_OK, "%s", dp_error_message());
    if (!file || !builtin) goto done;
    CHECK(strcmp(dp_model_name(file), name) == 0, "name %s", dp_model_name(file));
    CHECK(dp_model_num_params(file) == dp_model_num_params(builtin), "%s: %zu params, built-in %zu", name,
          dp_model_num_params(file), dp_model_num_params(builtin));
    CHECK(dp_model_num_param_tensors(file) == dp_model_num_param_tensors(builtin), "%s: tensors", name);
    CHECK(dp_model_num_layers(file) == dp_model_num_layers(builtin), "%s: %d layers, built-in %d", name,
          dp_model_num_layers(file), dp_model_num_layers(builtin));
    if (dp_model_num_param_tensors(file) != dp_model_num_param_tensors(builtin) ||
        dp_model_num_params(file) != dp_model_num_params(builtin))
        goto done;
    for (int i = 0; i < dp_model_num_param_tensors(file); i++) {
        const dp_param_info_t *a = dp_model_param(file, i), *b = dp_model_param(builtin, i);
        CHECK(strcmp(a->name, b->name) == 0 && a->ndim == b->ndim && a->offset == b->offset &&
                  a->numel == b->numel && memcmp(a->shape, b->shape, sizeof(int) * (size_t)a->ndim) == 0,
              "%s: parameter %d is %s, built-in %s", name, i, a->name, b->name);
    }
    const char *emulator = getenv("DPTRAIN_EMULATOR");
    if (emulator && *emulator && dp_model_num_params(file) > EMULATED_MAX_INIT_PARAMS) {
        printf("%s.cfg: same parameter table as the built-in (initial parameters and logits: not under %s)\n", name,
               emulator);
        goto done;
    }
    float *pa, *pb;
    float *ya = forward_once(file, 42, &pa), *yb = forward_once(builtin, 42, &pb);
    CHECK(memcmp(pa, pb, sizeof(float) * dp_model_num_params(file)) == 0, "%s: initial parameters differ", name);
    if (ya && yb) {
        CHECK(memcmp(ya, yb, sizeof(float) * 30) == 0, "%s: logits differ: %g vs %g", name, ya[0], yb[0]);
        float sum = 0.0f;
        for (int i = 0; i < 30; i++) sum += fabsf(ya[i]);
        CHECK(sum > 0.0f, "%s: logits all zero", name);
        printf("%s.cfg: same parameter table, initial parameters and logits as the built-in\n", name);
    }
    free(pa);
    free(pb);
    free(ya);
    free(yb);
done:
    dp_model_free(file);
    dp_model_free(builtin);
}

static int find_param(const dp_model_t *m, const char *name) {
    for (int i = 0; i < dp_model_num_param_tensors(m); i++)
        if (strcmp(dp_model_param(m, i)->name, name) == 0) return i;
    return -1;
}

/* The counts are tools/model_param_counts.py's output (PyTorch 1.13):
 *   alexnet: 5670602 trainable parameters, 0 running statistics
 *   resnet18: 11175818 trainable parameters, 7808 running statistics
 * resnet18 has 110 state_dict entries besides num_batches_tracked. */
static void test_shipped_counts(void) {
    dp_model_t *m = load_shipped("alexnet");
    if (m) {
        CHECK(dp_model_num_trainable(m) == 5670602, "alexnet: %zu trainable", dp_model_num_trainable(m));
        CHECK(dp_model_num_params(m) == 5670602, "alexnet: %zu params", dp_model_num_params(m));
        CHECK(dp_model_num_param_tensors(m) == 16, "alexnet: %d tensors", dp_model_num_param_tensors(m));
        int i = find_param(m, "fc1.weight");
        CHECK(i >= 0 && dp_model_param(m, i)->shape[1] == 2304, "alexnet: fc1.weight is not (1024, 2304)");
        CHECK(dp_model_num_outputs(m) == 10, "alexnet: %d outputs", dp_model_num_outputs(m));
        printf("alexnet.cfg: %zu parameters (PyTorch: 5670602)\n", dp_model_num_params(m));
        dp_model_free(m);
    }
    m = load_shipped("resnet18");
    if (m) {
        CHECK(dp_model_num_trainable(m) == 11175818, "resnet18: %zu trainable", dp_model_num_trainable(m));
        CHECK(dp_model_num_params(m) == 11175818 + 7808, "resnet18: %zu params", dp_model_num_params(m));
        CHECK(dp_model_num_param_tensors(m) == 110, "resnet18: %d tensors", dp_model_num_param_tensors(m));
        const char *names[] = {"0.weight", "1.running_var", "resnet_block2.0.conv3.weight",
                               "resnet_block4.1.bn2.bias", "fc.1.weight"};
        for (int k = 0; k < 5; k++) CHECK(find_param(m, names[k]) >= 0, "resnet18 lacks %s", names[k]);
        int i = find_param(m, "resnet_block3.0.conv3.weight");
        CHECK(i >= 0 && dp_model_param(m, i)->shape[0] == 256 && dp_model_param(m, i)->shape[1] == 128 &&
                  dp_model_param(m, i)->shape[2] == 1,
              "resnet18: resnet_block3.0.conv3.weight is not (256, 128, 1, 1)");
        CHECK(dp_model_num_outputs(m) == 10, "resnet18: %d outputs", dp_model_num_outputs(m));
        printf("resnet18.cfg: %zu trainable parameters (PyTorch: 11175818)\n", dp_model_num_trainable(m));
        dp_model_free(m);
    }
}

/* torchvision's networks (tools/model_param_counts.py, torchvision 0.14):
 *   resnet18-imagenet: 11689512 trainable parameters, 9600 running statistics, 102 tensors
 *   resnet34-imagenet: 21797672, 17024, 182
 *   resnet50-imagenet: 25557032, 53120, 267
 *   mobilenet_v2-imagenet: 3504872, 34112, 262
 *   resnet101-imagenet: 44549160, 105344, 522
 *   resnet152-imagenet: 60192808, 151424, 777
 *   resnext50_32x4d-imagenet: 25028904, 68224, 267
 *   resnext101_32x8d-imagenet: 88791336, 202880, 522
 *   wide_resnet50_2-imagenet: 68883240, 68224, 267
 *   wide_resnet101_2-imagenet: 126886696, 137856, 522
 *   mobilenet_v3_large-imagenet: 5483032, 24400, 266
 *   mobilenet_v3_small-imagenet: 2542856, 12112, 210
 *   convnext_tiny-imagenet: 28589128, 0, 182
 *   convnext_small-imagenet: 50223688, 0, 344
 *   convnext_base-imagenet: 88591464, 0, 344
 *   convnext_large-imagenet: 197767336, 0, 344
 * (the EfficientNets: test_efficientnet_counts)
 *   regnet_y_400mf-imagenet: 4344144, 27152, 331
 *   regnet_y_800mf-imagenet: 6432512, 30432, 293
 *   regnet_y_1_6gf-imagenet: 11202430, 52672, 540
 *   regnet_y_3_2gf-imagenet: 19436338, 66160, 426
 *   regnet_y_8gf-imagenet: 39381472, 86528, 350
 *   regnet_y_16gf-imagenet: 83590140, 122816, 369
 *   regnet_y_32gf-imagenet: 145046770, 158288, 407
 *   regnet_x_400mf-imagenet: 5495976, 37856, 357
 *   regnet_x_800mf-imagenet: 7259656, 37312, 267
 *   regnet_x_1_6gf-imagenet: 9190136, 43504, 297
 *   regnet_x_3_2gf-imagenet: 15296552, 62560, 402
 *   regnet_x_8gf-imagenet: 39572648, 90464, 372
 *   regnet_x_16gf-imagenet: 54278536, 111168, 357
 *   regnet_x_32gf-imagenet: 107811560, 162016, 372
 *   densenet121-imagenet: 7978856, 83648, 606
 *   densenet161-imagenet: 28681000, 219936, 806
 *   densenet169-imagenet: 14149480, 158400, 846
 *   densenet201-imagenet: 20013928, 229056, 1006
 *   squeezenet1_0-imagenet: 1248424, 0, 52
 *   squeezenet1_1-imagenet: 1235496, 0, 52
 * (tests/torchvision_check.py compares every name and shape with the
 * state_dict, and the logits and gradients.) */
static void test_imagenet_counts(void) {
    static const struct {
        const char *name;
        size_t trainable, buffers;
        int tensors;
        const char *param; /* one tensor and its shape */
        int shape[4];
    } models[] = {
        {"resnet18-imagenet", 11689512, 9600, 102, "layer2.0.downsample.0.weight", {128, 64, 1, 1}},
        {"resnet34-imagenet", 21797672, 17024, 182, "layer3.5.bn2.running_var", {256}},
        {"resnet50-imagenet", 25557032, 53120, 267, "layer1.0.downsample.0.weight", {256, 64, 1, 1}},
        {"mobilenet_v2-imagenet", 3504872, 34112, 262, "features.17.conv.1.0.weight", {960, 1, 3, 3}},
        {"resnet101-imagenet", 44549160, 105344, 522, "layer3.22.conv2.weight", {256, 256, 3, 3}},
        {"resnet152-imagenet", 60192808, 151424, 777, "layer2.7.bn3.running_mean", {512}},
        /* ResNeXt's 3x3 convolutions in 32 groups: 128 / 32 = 4 input channels each */
        {"resnext50_32x4d-imagenet", 25028904, 68224, 267, "layer1.0.conv2.weight", {128, 4, 3, 3}},
        {"resnext101_32x8d-imagenet", 88791336, 202880, 522, "layer4.2.conv2.weight", {2048, 64, 3, 3}},
        /* Wide ResNet: twice the bottleneck's width */
        {"wide_resnet50_2-imagenet", 68883240, 68224, 267, "layer1.0.conv1.weight", {128, 64, 1, 1}},
        {"wide_resnet101_2-imagenet", 126886696, 137856, 522, "layer4.2.conv3.weight", {2048, 1024, 1, 1}},
        /* MobileNetV3: squeeze-excitation's 1x1 convolutions with biases */
        {"mobilenet_v3_large-imagenet", 5483032, 24400, 266, "features.13.block.2.fc1.weight", {168, 672, 1, 1}},
        {"mobilenet_v3_small-imagenet", 2542856, 12112, 210, "features.4.block.2.fc2.bias", {96}},
        /* ConvNeXt: layer norms, nn.Linear weights on channels-last data, layer scales; no buffers */
        {"convnext_tiny-imagenet", 28589128, 0, 182, "features.5.8.block.3.weight", {1536, 384}},
        {"convnext_small-imagenet", 50223688, 0, 344, "features.5.26.layer_scale", {384, 1, 1}},
        {"convnext_base-imagenet", 88591464, 0, 344, "features.6.1.weight", {1024, 512, 2, 2}},
        {"convnext_large-imagenet", 197767336, 0, 344, "features.7.2.block.5.weight", {1536, 6144}},
        /* RegNetY: squeeze-excitation to a quarter of the block's input width (104 -> 12: round(0.25 x 48)) */
        {"regnet_y_400mf-imagenet", 4344144, 27152, 331, "trunk_output.block2.block2-0.f.se.fc1.weight",
         {12, 104, 1, 1}},
        {"regnet_y_800mf-imagenet", 6432512, 30432, 293, "trunk_output.block3.block3-2.f.b.0.weight", {320, 16, 3, 3}},
        {"regnet_y_1_6gf-imagenet", 11202430, 52672, 540, "trunk_output.block1.block1-1.f.se.fc2.bias", {48}},
        {"regnet_y_3_2gf-imagenet", 19436338, 66160, 426, "trunk_output.block2.block2-0.f.se.fc1.weight",
         {18, 216, 1, 1}},
        {"regnet_y_8gf-imagenet", 39381472, 86528, 350, "trunk_output.block2.block2-0.f.se.fc1.weight", {56, 448, 1, 1}},
        {"regnet_y_16gf-imagenet", 83590140, 122816, 369, "trunk_output.block2.block2-0.f.se.fc1.weight",
         {56, 448, 1, 1}},
        {"regnet_y_32gf-imagenet", 145046770, 158288, 407, "trunk_output.block2.block2-0.f.se.fc1.weight",
         {58, 696, 1, 1}},
        /* RegNetX: the 3x3 convolutions in groups of the group width (16 ... 168 channels) */
        {"regnet_x_400mf-imagenet", 5495976, 37856, 357, "trunk_output.block1.block1-0.proj.0.weight", {32, 32, 1, 1}},
        {"regnet_x_800mf-imagenet", 7259656, 37312, 267, "trunk_output.block3.block3-1.f.b.0.weight", {288, 16, 3, 3}},
        {"regnet_x_1_6gf-imagenet", 9190136, 43504, 297, "trunk_output.block3.block3-1.f.b.0.weight", {408, 24, 3, 3}},
        {"regnet_x_3_2gf-imagenet", 15296552, 62560, 402, "trunk_output.block3.block3-1.f.b.0.weight", {432, 48, 3, 3}},
        {"regnet_x_8gf-imagenet", 39572648, 90464, 372, "trunk_output.block3.block3-1.f.b.0.weight", {720, 120, 3, 3}},
        {"regnet_x_16gf-imagenet", 54278536, 111168, 357, "trunk_output.block3.block3-1.f.b.0.weight",
         {896, 128, 3, 3}},
        {"regnet_x_32gf-imagenet", 107811560, 162016, 372, "trunk_output.block3.block3-1.f.b.0.weight",
         {1344, 168, 3, 3}},
        /* DenseNet: a transition halves the concatenated channels (densenet161: 768 -> 384) */
        {"densenet121-imagenet", 7978856, 83648, 606, "features.transition2.conv.weight", {256, 512, 1, 1}},
        {"densenet161-imagenet", 28681000, 219936, 806, "features.transition2.conv.weight", {384, 768, 1, 1}},
        {"densenet169-imagenet", 14149480, 158400, 846, "features.transition2.conv.weight", {256, 512, 1, 1}},
        {"densenet201-imagenet", 20013928, 229056, 1006, "features.transition2.conv.weight", {256, 512, 1, 1}},
        /* SqueezeNet: Fire modules ([concat] of expand1x1 and expand3x3), the head a 1x1 conv */
        {"squeezenet1_0-imagenet", 1248424, 0, 52, "features.12.expand3x3.weight", {256, 64, 3, 3}},
        {"squeezenet1_1-imagenet", 1235496, 0, 52, "classifier.1.weight", {1000, 512, 1, 1}},
    };
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        dp_model_t *m = load_shipped(models[k].name);
        if (!m) continue;
        size_t trainable = dp_model_num_trainable(m);
        CHECK(trainable == models[k].trainable, "%s: %zu trainable, torchvision %zu", models[k].name, trainable,
              models[k].trainable);
        CHECK(dp_model_num_params(m) - trainable == models[k].buffers, "%s: %zu buffer values, torchvision %zu",
              models[k].name, dp_model_num_params(m) - trainable, models[k].buffers);
        CHECK(dp_model_num_param_tensors(m) == models[k].tensors, "%s: %d tensors", models[k].name,
              dp_model_num_param_tensors(m));
        int c, h, w;
        dp_model_input_shape(m, &c, &h, &w);
        CHECK(c == 3 && h == 224 && w == 224 && dp_model_num_outputs(m) == 1000, "%s: input %dx%dx%d, %d outputs",
              models[k].name, c, h, w, dp_model_num_outputs(m));
        int i = find_param(m, models[k].param);
        CHECK(i >= 0, "%s lacks %s", models[k].name, models[k].param);
        if (i >= 0) {
            const dp_param_info_t *p = dp_model_param(m, i);
            int same = 1;
            for (int d = 0; d < p->ndim; d++) same &= p->shape[d] == models[k].shape[d];
            CHECK(same, "%s: %s has another shape", models[k].name, models[k].param);
        }
        printf("%s.cfg: %zu trainable parameters, %zu statistics (torchvision: %zu, %zu)\n", models[k].name,
               trainable, dp_model_num_params(m) - trainable, models[k].trainable, models[k].buffers);
        dp_model_free(m);
    }
}

/* torchvision's EfficientNets (tools/model_param_counts.py, torchvision 0.14):
 * trainable parameters, running statistics, tensors, at their weights' crop
 * sizes (tests/torchvision_check.py structure compares every name and shape
 * with the state_dict); one tensor each, and the stochastic depth blocks. */
static void test_efficientnet_counts(void) {
    static const struct {
        const char *name;
        size_t trainable, buffers;
        int tensors, size;
        const char *param; /* one tensor and its shape */
        int shape[4];
    } models[] = {
        {"efficientnet_b0-imagenet", 5288548, 42016, 311, 224, "features.6.0.block.2.fc1.weight", {28, 672, 1, 1}},
        {"efficientnet_b1-imagenet", 7794184, 62048, 439, 240, "features.2.2.block.1.0.weight", {144, 1, 3, 3}},
        {"efficientnet_b2-imagenet", 9109994, 67568, 439, 288, "features.8.0.weight", {1408, 352, 1, 1}},
        {"efficientnet_b3-imagenet", 12233232, 87296, 496, 300, "classifier.1.weight", {1000, 1536}},
        {"efficientnet_b4-imagenet", 19341616, 125200, 610, 380, "features.0.0.weight", {48, 3, 3, 3}},
        {"efficientnet_b5-imagenet", 30389784, 172736, 738, 456, "features.6.8.block.3.1.running_var", {304}},
        {"efficientnet_b6-imagenet", 43040704, 224432, 852, 528, "features.7.2.block.1.0.weight", {3456, 1, 3, 3}},
        {"efficientnet_b7-imagenet", 66347960, 310720, 1037, 600, "features.5.9.block.2.fc2.bias", {1344}},
        /* V2: FusedMBConv (a plain 3x3 expansion) in the first stages */
        {"efficientnet_v2_s-imagenet", 21458488, 153872, 672, 384, "features.2.3.block.0.0.weight", {192, 48, 3, 3}},
        {"efficientnet_v2_m-imagenet", 54139356, 292032, 963, 480, "features.1.2.block.0.1.weight", {24}},
        {"efficientnet_v2_l-imagenet", 118515272, 512576, 1331, 480, "features.7.6.block.3.0.weight", {640, 3840, 1, 1}},
    };
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        dp_model_t *m = load_shipped(models[k].name);
        if (!m) continue;
        size_t trainable = dp_model_num_trainable(m);
        CHECK(trainable == models[k].trainable && dp_model_num_params(m) - trainable == models[k].buffers &&
                  dp_model_num_param_tensors(m) == models[k].tensors,
              "%s: %zu trainable, %zu buffer values, %d tensors; torchvision %zu, %zu, %d", models[k].name, trainable,
              dp_model_num_params(m) - trainable, dp_model_num_param_tensors(m), models[k].trainable,
              models[k].buffers, models[k].tensors);
        int c, h, w;
        dp_model_input_shape(m, &c, &h, &w);
        CHECK(c == 3 && h == models[k].size && w == models[k].size && dp_model_num_outputs(m) == 1000,
              "%s: input %dx%dx%d, %d outputs", models[k].name, c, h, w, dp_model_num_outputs(m));
        int i = find_param(m, models[k].param), same = i >= 0;
        for (int d = 0; same && d < dp_model_param(m, i)->ndim; d++)
            same &= dp_model_param(m, i)->shape[d] == models[k].shape[d];
        CHECK(same, "%s: %s missing or of another shape", models[k].name, models[k].param);
        printf("%s.cfg: %zu trainable parameters, %zu statistics (torchvision: %zu, %zu), %dx%d\n", models[k].name,
               trainable, dp_model_num_params(m) - trainable, models[k].trainable, models[k].buffers, h, w);
        dp_model_free(m);
    }
}

/* The sample mean and standard deviation of a tensor's values. */
static void moments(const float *v, size_t n, double *mean, double *sd) {
    double s = 0.0, s2 = 0.0;
    for (size_t i = 0; i < n; i++) s += v[i];
    *mean = s / (double)n;
    for (size_t i = 0; i < n; i++) s2 += (v[i] - *mean) * (v[i] - *mean);
    *sd = sqrt(s2 / (double)n);
}

/* ConvNeXt's (torchvision's): [net] init = normal, init_scale = 0.02 for
 * the convolutions and the 2-D (linear-shaped) 1x1 weights, biases 0,
 * layer norms 1 and 0, layer scales their init (1e-6). */
static void test_convnext_init(void) {
    static const char text[] =
        "[net]\ninit = normal\ninit_scale = 0.02\nchannels = 3\nheight = 8\nwidth = 8\n"
        "[conv]\nname = stem\nfilters = 32\nsize = 4\nstride = 4\n[layernorm]\nname = n\neps = 1e-6\n"
        "[conv]\nname = b.3\nfilters = 128\nsize = 1\nweight_shape = linear\nactivation = gelu\n"
        "[layer_scale]\nname = b\ninit = 1e-6\n[global_avgpool]\n[flatten]\n[linear]\nname = head\nout = 10\n";
    dp_model_t *m = NULL;
    CHECK(dp_model_parse(text, strlen(text), "convnext.cfg", &m) == DP_OK, "%s", dp_error_message());
    if (!m) return;
    float *params = malloc(sizeof(float) * dp_model_num_params(m));
    dp_rng_t rng;
    dp_rng_seed(&rng, 11);
    dp_model_init_params(m, params, &rng);
    const char *normal[] = {"stem.weight", "b.3.weight"};
    for (int k = 0; k < 2; k++) {
        const dp_param_info_t *p = dp_model_param(m, find_param(m, normal[k]));
        double mean, sd;
        moments(params + p->offset, p->numel, &mean, &sd);
        CHECK(fabs(sd / 0.02 - 1.0) < 0.05 && fabs(mean) < 4 * 0.02 / sqrt((double)p->numel),
              "%s: mean %g, sd %g, expected N(0, 0.02^2)", normal[k], mean, sd);
    }
    const struct { const char *name; float value; } constant[] = {
        {"stem.bias", 0.0f}, {"b.3.bias", 0.0f}, {"n.weight", 1.0f}, {"n.bias", 0.0f}, {"b.layer_scale", 1e-6f},
    };
    for (int k = 0; k < 5; k++) {
        const dp_param_info_t *p = dp_model_param(m, find_param(m, constant[k].name));
        int all = 1;
        for (size_t i = 0; i < p->numel; i++) all &= params[p->offset + i] == constant[k].value;
        CHECK(all, "%s is not all %g", constant[k].name, (double)constant[k].value);
    }
    free(params);
    dp_model_free(m);
}

/* init = kaiming_fan_out: N(0, 2 / fan_out) with fan_out = filters x
 * kernel (groups do not divide it, as PyTorch), biases 0; a layer's own
 * init = torch (U(+-1/sqrt(fan_in)), biases too), init = normal with
 * its init_scale, init = uniform_fan_out (U(+-1/sqrt(out)), bias 0),
 * init = kaiming_fan_out_torch_bias (RegNet's
 * squeeze-excitation: weights N(0, 2 / fan_out), biases U(+-1/sqrt(fan_in))),
 * kaiming_fan_in (DenseNet's convolutions: N(0, 2 / fan_in), biases 0) and
 * torch_zero_bias (DenseNet's classifier: U(+-1/sqrt(fan_in)), biases 0) and
 * kaiming_uniform (SqueezeNet's convolutions: U(+-sqrt(6/fan_in)), biases 0);
 * batch norm 1 and 0 whatever the init. */
static void test_init_kinds(void) {
    static const char text[] =
        "[net]\ninit = kaiming_fan_out\nchannels = 8\nheight = 6\nwidth = 6\n"
        "[conv]\nname = c\nfilters = 64\nsize = 3\npad = 1\n"         /* fan_out 576 */
        "[conv]\nname = dw\nfilters = 64\nsize = 3\ngroups = 64\n"    /* fan_out 576, fan_in 9 */
        "[batchnorm]\nname = bn\n[global_avgpool]\n"
        "[conv]\nname = se\nfilters = 64\nsize = 1\ninit = kaiming_fan_out_torch_bias\n" /* fan_out 64, bound 1/8 */
        "[conv]\nname = fi\nfilters = 16\nsize = 1\ninit = kaiming_fan_in\n" /* fan_in 64, fan_out 16 */
        "[conv]\nname = ku\nfilters = 24\nsize = 1\ninit = kaiming_uniform\n" /* fan_in 16: bound sqrt(6/16) */
        "[conv]\nname = back\nfilters = 64\nsize = 1\n"
        "[flatten]\n"
        "[linear]\nname = zb\nout = 64\ninit = torch_zero_bias\n"     /* bound 1/8 */
        "[linear]\nname = fc\nout = 100\ninit = torch\n"              /* bound 1/8 */
        "[linear]\nname = head\nout = 200\ninit = normal\ninit_scale = 0.5\n"
        "[linear]\nname = last\nout = 64\ninit = uniform_fan_out\n";    /* bound 1/8 */
    dp_model_t *m = NULL;
    CHECK(dp_model_parse(text, strlen(text), "init.cfg", &m) == DP_OK, "%s", dp_error_message());
    if (!m) return;
    float *params = malloc(sizeof(float) * dp_model_num_params(m));
    dp_rng_t rng;
    dp_rng_seed(&rng, 7);
    dp_model_init_params(m, params, &rng);
    struct { const char *name; double sd, tol; } normal[] = {
        {"c.weight", sqrt(2.0 / 576), 0.03}, {"dw.weight", sqrt(2.0 / 576), 0.1}, {"head.weight", 0.5, 0.03},
        {"se.weight", sqrt(2.0 / 64), 0.05}, {"fi.weight", sqrt(2.0 / 64), 0.08},
    };
    for (int k = 0; k < 5; k++) {
        const dp_param_info_t *p = dp_model_param(m, find_param(m, normal[k].name));
        double mean, sd;
        moments(params + p->offset, p->numel, &mean, &sd);
        CHECK(fabs(sd / normal[k].sd - 1.0) < normal[k].tol && fabs(mean) < 4 * normal[k].sd / sqrt((double)p->numel),
              "%s: mean %g, sd %g, expected N(0, %g^2)", normal[k].name, mean, sd, normal[k].sd);
    }
    const char *zeros[] = {"c.bias", "head.bias", "bn.bias", "last.bias", "fi.bias", "zb.bias", "ku.bias"};
    for (int k = 0; k < 7; k++) {
        const dp_param_info_t *p = dp_model_param(m, find_param(m, zeros[k]));
        int all = 1;
        for (size_t i = 0; i < p->numel; i++) all &= params[p->offset + i] == 0.0f;
        CHECK(all, "%s is not all zeros", zeros[k]);
    }
    const dp_param_info_t *bnw = dp_model_param(m, find_param(m, "bn.weight"));
    CHECK(params[bnw->offset] == 1.0f && params[bnw->offset + 63] == 1.0f, "bn.weight is not 1");
    const char *uniform[] = {"fc.weight", "fc.bias", "se.bias", "zb.weight", "last.weight"}; /* last: 1/sqrt(out = 64) */
    for (int k = 0; k < 5; k++) {
        const dp_param_info_t *p = dp_model_param(m, find_param(m, uniform[k]));
        double mean, sd, largest = 0.0;
        moments(params + p->offset, p->numel, &mean, &sd);
        for (size_t i = 0; i < p->numel; i++) largest = fmax(largest, fabs(params[p->offset + i]));
        /* U(-1/8, 1/8): sd 1/(8 sqrt 3), the largest close to 1/8 */
        CHECK(largest <= 0.125 && largest > 0.11 && fabs(sd * 8 * sqrt(3.0) - 1.0) < (k ? 0.25 : 0.05),
              "%s: largest %g, sd %g, expected U(-1/8, 1/8)", uniform[k], largest, sd);
    }
    { /* kaiming_uniform: U(-r, r), r = sqrt(6 / 16) (sd r / sqrt 3 = sqrt(2 / 16)) */
        const dp_param_info_t *p = dp_model_param(m, find_param(m, "ku.weight"));
        double mean, sd, largest = 0.0, bound = sqrt(6.0 / 16);
        moments(params + p->offset, p->numel, &mean, &sd);
        for (size_t i = 0; i < p->numel; i++) largest = fmax(largest, fabs(params[p->offset + i]));
        CHECK(largest <= bound && largest > 0.95 * bound && fabs(sd / sqrt(2.0 / 16) - 1.0) < 0.1,
              "ku.weight: largest %g, sd %g, expected U(-%g, %g)", largest, sd, bound, bound);
    }
    free(params);
    dp_model_free(m);
}

static void test_files(void) {
    dp_model_t *m = (dp_model_t *)&m;
    CHECK(dp_model_load_file("/nonexistent/x.cfg", &m) == DP_ERR_IO && m == NULL, "missing file");
    CHECK(strcmp(dp_error_message(), "/nonexistent/x.cfg: cannot open model file (No such file or directory)") == 0,
          "message: %s", dp_error_message());
    /* no name: a one-line error, not a crash (a program passing argv[1] without checking argc) */
    m = (dp_model_t *)&m;
    CHECK(dp_model_load(NULL, &m) == DP_ERR_ARG && m == NULL &&
          strcmp(dp_error_message(), "model: no name or path given (NULL)") == 0, "dp_model_load(NULL): %s",
          dp_error_message());
    m = (dp_model_t *)&m;
    CHECK(dp_model_load_file(NULL, &m) == DP_ERR_ARG && m == NULL &&
          strcmp(dp_error_message(), "model file: no path given (NULL)") == 0, "dp_model_load_file(NULL): %s",
          dp_error_message());
    m = (dp_model_t *)&m;
    CHECK(dp_model_builtin(NULL, &m) == DP_ERR_ARG && m == NULL &&
          strcmp(dp_error_message(), "built-in model: no name given (NULL)") == 0, "dp_model_builtin(NULL): %s",
          dp_error_message());
    CHECK(dp_model_load_file(testing_tmpdir(), &m) == DP_ERR_IO, "a directory");
    CHECK(strstr(dp_error_message(), "cannot read model file (Is a directory)") != NULL, "message: %s",
          dp_error_message());
    char path[512];
    snprintf(path, sizeof path, "%s/broken.cfg", testing_tmpdir());
    FILE *f = fopen(path, "w");
    fputs("[net]\nchannels = 1\nheight = 28\nwidth = 28\n\n[conv]\nname = c\nfiltres = 3\n", f);
    fclose(f);
    CHECK(dp_model_load_file(path, &m) == DP_ERR_FORMAT, "broken file");
    char want[768];
    snprintf(want, sizeof want, "%s:8: unknown key 'filtres' for [conv]", path);
    CHECK(strncmp(dp_error_message(), want, strlen(want)) == 0, "message: %s", dp_error_message());
    remove(path);
    size_t big = (size_t)DP_MODEL_FILE_MAX_BYTES + 1;
    char *text = malloc(big);
    memset(text, '#', big);
    CHECK(dp_model_parse(text, big, "big.cfg", &m) == DP_ERR_FORMAT && m == NULL, "a file over 1 MiB");
    CHECK(strcmp(dp_error_message(), "big.cfg:1: larger than 1048576 bytes: not a model file") == 0, "message: %s",
          dp_error_message());
    free(text);
    /* --model NAME|FILE */
    CHECK(dp_model_load("lenet-paddle", &m) == DP_OK && dp_model_num_params(m) == 20350, "built-in by name");
    CHECK(dp_model_source(m, NULL) == NULL, "a built-in model has no model file text");
    dp_model_free(m);
    CHECK(dp_model_load("resnet-9000", &m) == DP_ERR_ARG && m == NULL, "unknown name");
    /* this test is the build tree's: the source tree's models/ is where a name is looked for */
    char models[4200], unknown_want[4400];
    snprintf(models, sizeof models, "%s", testing_path("../models"));
    char *real = realpath(models, NULL);
    snprintf(unknown_want, sizeof unknown_want, "unknown model 'resnet-9000': not a built-in model (lenet, "
             "lenet-paddle, resnet18, alexnet) nor a model file (looked for resnet-9000.cfg in %s)",
             real ? real : models);
    free(real);
    CHECK(strcmp(dp_error_message(), unknown_want) == 0, "message: %s", dp_error_message());
    CHECK(dp_model_load("missing.cfg", &m) == DP_ERR_IO, "a .cfg name is a path");
    CHECK(dp_model_load("models/missing", &m) == DP_ERR_IO, "a name with a / is a path");
    CHECK(dp_model_load(testing_path("../models/lenet.cfg"), &m) == DP_OK, "%s", dp_error_message());
    size_t len = 0;
    const char *source = m ? dp_model_source(m, &len) : NULL;
    CHECK(source && len > 100 && strlen(source) == len && source[0] == '#', "the model file's text kept");
    dp_model_free(m);
    /* a name of models/ (not a built-in one), found in the source tree by this build-tree program */
    CHECK(dp_model_load("lenet-cifar", &m) == DP_OK && m && dp_model_num_params(m) == 62006, "by name: %s",
          dp_error_message());
    CHECK(m && strcmp(dp_model_name(m), "lenet-cifar") == 0, "named after its file: %s", m ? dp_model_name(m) : "");
    dp_model_free(m);
    CHECK(dp_model_load("lenet-cifar.cfg", &m) == DP_OK && m, "by file name: %s", dp_error_message());
    dp_model_free(m);
}

/* Mutated copies of the shipped models (bytes flipped, inserted, deleted,
 * lines duplicated): each must parse or fail with one line starting
 * "t.cfg:"; under AddressSanitizer (scripts/sanitize.sh) this also checks
 * memory safety. tests/fuzz_model_file.c is the thorough version. */
static void test_mutations(void) {
    const char *names[] = {"lenet", "resnet18"};
    static const char alphabet[] = "[]=#-\n \t0123456789abcdefilnoprstuvwx_.\r\x01\xff";
    dp_rng_t rng;
    dp_rng_seed(&rng, 5);
    int parsed = 0, failed_cleanly = 0, bad = 0;
    for (int n = 0; n < 2; n++) {
        char rel[256];
        snprintf(rel, sizeof rel, "../models/%s.cfg", names[n]);
        FILE *f = fopen(testing_path(rel), "rb");
        CHECK(f != NULL, "cannot open %s", rel);
        if (!f) continue;
        static char original[1 << 15], text[1 << 16];
        size_t len = fread(original, 1, sizeof original, f);
        fclose(f);
        for (int trial = 0; trial < 1500; trial++) {
            memcpy(text, original, len);
            size_t size = len;
            int edits = 1 + (int)dp_rng_below(&rng, 4);
            for (int e = 0; e < edits && size > 0; e++) {
                size_t at = (size_t)dp_rng_below(&rng, size);
                char c = alphabet[dp_rng_below(&rng, sizeof alphabet - 1)];
                switch (dp_rng_below(&rng, 4)) {
                case 0: text[at] = c; break;
                case 1:
                    memmove(text + at + 1, text + at, size - at);
                    text[at] = c;
                    size++;
                    break;
                case 2:
                    memmove(text + at, text + at + 1, size - at - 1);
                    size--;
                    break;
                default: { /* cut everything after `at` */
                    size = at + 1;
                    break;
                }
                }
            }
            dp_model_t *m = NULL;
            dp_status_t status = dp_model_parse(text, size, "t.cfg", &m);
            if (status == DP_OK) {
                parsed++;
                dp_model_free(m);
            } else if (strncmp(dp_error_message(), "t.cfg:", 6) == 0 && !strchr(dp_error_message(), '\n') &&
                       m == NULL) {
                failed_cleanly++;
            } else {
                if (bad++ < 5) CHECK(0, "mutation %d of %s: %s", trial, names[n], dp_error_message());
            }
        }
    }
    CHECK(bad == 0, "%d mutations failed without a FILE:LINE message", bad);
    printf("mutations: %d parsed, %d failed with a FILE:LINE message\n", parsed, failed_cleanly);
}

int main(void) {
    test_valid();
    test_valid_graph_layers();
    test_broken();
    for (int i = 0; dp_builtin_models[i]; i++) test_builtin_equivalence(dp_builtin_models[i]);
    test_shipped_counts();
    test_imagenet_counts();
    test_efficientnet_counts();
    test_init_kinds();
    test_convnext_init();
    test_files();
    test_mutations();
    return testing_finish("test_model_file");
}
