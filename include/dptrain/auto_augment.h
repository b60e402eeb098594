/* auto_augment.h - torchvision 0.14's TrivialAugmentWide, RandAugment and
 * AutoAugment (transforms/autoaugment.py) on a planar (C, H, W) uint8 image of 1 or 3
 * channels, with the pixels PIL 9 gives (the path torchvision's reference
 * recipe takes: the ops run on the PIL image after RandomResizedCrop and
 * the flip):
 * - the 14 ops of _apply_op: Identity; ShearX, ShearY, TranslateX,
 *   TranslateY (F.affine: PIL's Image.transform(AFFINE, NEAREST) with
 *   torchvision's inverse matrix), Rotate (Image.rotate, NEAREST: 0, 90,
 *   180, 270 degrees as PIL's transposes, other angles as its affine
 *   transform); fill 0 (torchvision's fill=None). PIL's nearest affine
 *   is three code paths, each reproduced: a table of columns when the
 *   matrix only scales and translates, 16.16 fixed point when the image's
 *   corners map inside +-32768, doubles otherwise;
 *   Brightness, Color, Contrast, Sharpness (ImageEnhance: Image.blend of
 *   black / the L image / its rounded mean / the SMOOTH-filtered image
 *   with the image, the factor 1 + magnitude in float32, truncated, and
 *   clipped when extrapolating); Posterize, Solarize, AutoContrast,
 *   Equalize, Invert (ImageOps' lookup tables);
 * - the policy tables (magnitudes as torch.linspace makes them in
 *   float32, 31 bins) and the draws: TrivialAugmentWide one op, one bin,
 *   one sign; RandAugment 2 ops at a fixed bin (--ra-magnitude, default
 *   9), each with its sign. A sign is drawn only for a signed op, a bin
 *   only for an op with a range, as torchvision does. AutoAugment (the
 *   imagenet, cifar10 and svhn policies of Cubuk et al.): one of the
 *   policy's 25 sub-policies, then each of its 2 ops with its probability
 *   at its bin of 10 (AutoAugment.get_params: the sub-policy, 2
 *   probabilities, 2 signs, always drawn).
 * The draws come from the caller's words (image_transform.h dp_draw_fn):
 * randint(n) is word % n. dptrain's generator is not torch's: the
 * draws are distributed as torchvision's, not the same numbers.
 * Thread-safe: no global state, scratch allocated per call.
 */
#ifndef DPTRAIN_AUTO_AUGMENT_H
#define DPTRAIN_AUTO_AUGMENT_H

#include "dptrain/image_transform.h"
#include "dptrain/status.h"

/* The ops, in torchvision's order of _augmentation_space. */
typedef enum {
    DP_AA_IDENTITY,
    DP_AA_SHEAR_X,
    DP_AA_SHEAR_Y,
    DP_AA_TRANSLATE_X,
    DP_AA_TRANSLATE_Y,
    DP_AA_ROTATE,
    DP_AA_BRIGHTNESS,
    DP_AA_COLOR,
    DP_AA_CONTRAST,
    DP_AA_SHARPNESS,
    DP_AA_POSTERIZE,
    DP_AA_SOLARIZE,
    DP_AA_AUTOCONTRAST,
    DP_AA_EQUALIZE,
    DP_AA_INVERT, /* AutoAugment's policies only */
    DP_AA_OPS
} dp_aa_op_t;

#define DP_AA_SPACE_OPS 14 /* TrivialAugmentWide's and RandAugment's ops: Identity to Equalize */

typedef enum {
    DP_AUTO_AUGMENT_NONE,
    DP_AUTO_AUGMENT_TA_WIDE,
    DP_AUTO_AUGMENT_RA,
    DP_AUTO_AUGMENT_IMAGENET, /* AutoAugmentPolicy.IMAGENET */
    DP_AUTO_AUGMENT_CIFAR10,
    DP_AUTO_AUGMENT_SVHN,
    DP_AUTO_AUGMENT_KINDS
} dp_auto_augment_kind_t;

#define DP_AA_BINS 31      /* num_magnitude_bins of TrivialAugmentWide and RandAugment */
#define DP_AA_AUTO_BINS 10 /* AutoAugment's */
#define DP_RA_OPS 2        /* RandAugment's num_ops */
#define DP_RA_MAGNITUDE 9  /* RandAugment's default magnitude */

/* How the geometric ops (ShearX/Y, TranslateX/Y, Rotate) sample: torchvision's `interpolation`. */
typedef enum {
    DP_AA_BILINEAR, /* the reference recipe's (its --interpolation's default): PIL's bilinear transform filter */
    DP_AA_NEAREST,  /* the transforms' own default (TrivialAugmentWide() built alone) */
    DP_AA_BICUBIC,  /* the recipe's with --interpolation bicubic: PIL's bicubic transform filter */
} dp_aa_interpolation_t;

typedef struct {
    dp_auto_augment_kind_t kind;
    int magnitude; /* RandAugment's bin, 0..30 */
    dp_aa_interpolation_t interpolation;
} dp_auto_augment_t;

/* One op drawn: the op and its signed magnitude. */
typedef struct {
    dp_aa_op_t op;
    double magnitude;
} dp_aa_choice_t;

/* One op of an AutoAugment sub-policy: applied with probability p, at its bin (-1: an op without magnitude). */
typedef struct {
    dp_aa_op_t op;
    float p;
    int bin;
} dp_aa_sub_op_t;

#define DP_AA_SUB_POLICIES 25 /* of each AutoAugment policy */

/* Sub-policy `index` (0..24) of AutoAugment policy `kind` (imagenet, cifar10, svhn): its 2 ops in order, as
 * torchvision's AutoAugment._get_policies lists them; NULL for another kind or index. */
const dp_aa_sub_op_t *dp_auto_augment_sub_policy(dp_auto_augment_kind_t kind, int index);

/* torchvision's name of an op ("ShearX"); of a kind ("none", "ta_wide", "ra", "imagenet", "cifar10", "svhn"). */
const char *dp_aa_op_name(dp_aa_op_t op);
const char *dp_auto_augment_kind_name(dp_auto_augment_kind_t kind);

/* The kind named `text` (one of the kinds' names): DP_OK, or one line naming `who`. */
dp_status_t dp_auto_augment_parse(const char *text, const char *who, dp_auto_augment_kind_t *kind);

/* Whether the op's magnitude is drawn with a sign; whether it has a range of bins. */
int dp_aa_op_signed(dp_aa_op_t op);
int dp_aa_op_ranged(dp_aa_op_t op);

/* The policy's magnitude of `op` at `bin` (0..30; AutoAugment's 0..9) for
 * an image of height x width (RandAugment's and AutoAugment's translations
 * depend on it), unsigned: the float32 of torch.linspace / the posterize
 * bits, as a double. */
double dp_aa_magnitude(dp_auto_augment_kind_t kind, dp_aa_op_t op, int bin, int height, int width);

/* The policy's draws for an image of height x width: up to DP_RA_OPS
 * choices written to `out`, their count returned (0 for none). */
int dp_auto_augment_draw(const dp_auto_augment_t *policy, int height, int width, dp_draw_fn draw, void *state,
                         dp_aa_choice_t out[DP_RA_OPS]);

/* _apply_op(img, op, magnitude, interpolation) on the PIL image of
 * `pixels` (channels x height x width, planar, channels 1 or 3), in place;
 * dp_aa_apply with NEAREST. Bilinear is Image.transform(AFFINE, BILINEAR):
 * at pixel (x, y) the matrix maps (x + 0.5, y + 0.5) to (u, v), outside
 * [0, W) x [0, H) the fill 0, else the 2x2 neighbourhood of (u - 0.5,
 * v - 0.5) (edges clamped) blended in doubles along x, then y, truncated.
 * Bicubic is Image.transform(AFFINE, BICUBIC): the 4x4 neighbourhood
 * through Geometry.c's cubic (a = -1) along x, then y, clamped, truncated. */
dp_status_t dp_aa_apply_interpolated(dp_aa_op_t op, double magnitude, dp_aa_interpolation_t interpolation,
                                     unsigned char *pixels, int channels, int height, int width);
dp_status_t dp_aa_apply(dp_aa_op_t op, double magnitude, unsigned char *pixels, int channels, int height, int width);

/* The policy's draws, then their ops in order, in place. */
dp_status_t dp_auto_augment_apply(const dp_auto_augment_t *policy, dp_draw_fn draw, void *state, unsigned char *pixels,
                                  int channels, int height, int width);

#endif
