/* train_options.c - `dptrain train`'s options (train.h): the help text,
 * the option table and its defaults, and every check of the options that
 * needs neither the data nor the devices: each value, the combinations
 * (an error where options contradict each other, one warning line where
 * one would do nothing), the folders of the output files; and the learning
 * rate's default, the optimizer's own. train.c runs what they describe.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "dptrain/io.h"
#include "dptrain/profile.h"
#include "dptrain/random_erase.h"
#include "options.h"
#include "train.h"

const char train_usage[] =
    "usage: dptrain train [options]\n"
    "\n"
    "Trains a network with minibatch SGD (or momentum, Adagrad, Adam, AdamW), printing\n"
    "one line per epoch: mean training loss, training accuracy, test accuracy\n"
    "(for a model of more than 10 classes also the top-5 accuracy, \"test acc 0.761\n"
    "(top-5 0.929)\"), the learning rate of the epoch's last step, seconds per epoch\n"
    "(the training steps, without evaluation), images per second and the devices.\n"
    "\n"
    "options:\n"
    "  --model NAME|FILE         lenet (d2l 12.5, default; with --resume, the checkpoint's),\n"
    "                            lenet-paddle, resnet18, alexnet, a model file\n"
    "                            (docs/model-format.md), or the name of an installed one\n"
    "                            (resnet18-cifar: models/resnet18-cifar.cfg)\n"
    "  --data DIR                the training and test data, recognised by what DIR holds:\n"
    "                            the four IDX files of (Fashion-)MNIST (train-images-idx3-ubyte,\n"
    "                            train-labels-idx1-ubyte, t10k-images-idx3-ubyte,\n"
    "                            t10k-labels-idx1-ubyte, each also .gz), an image folder\n"
    "                            (DIR/train/CLASS/IMAGE and DIR/test/CLASS/IMAGE or\n"
    "                            DIR/val/CLASS/IMAGE; or class\n"
    "                            folders DIR/CLASS/IMAGE alone, --holdout of them tested;\n"
    "                            JPEG, PNG, BMP, PNM of any size), image lists (DIR/train.txt\n"
    "                            or .csv of PATH LABEL lines beside DIR/val.txt or .csv, or\n"
    "                            --data LIST.txt|LIST.csv alone, --holdout of it tested;\n"
    "                            docs/data.md) or CIFAR-10's binary\n"
    "                            version (data_batch_1.bin .., test_batch.bin); default\n"
    "                            " DP_DEFAULT_DATA_DIR "\n"
    "  --batch-size N            examples per minibatch (default 256); with --accumulate,\n"
    "                            per micro-batch\n"
    "  --accumulate N            gradient accumulation: N micro-batches of --batch-size per\n"
    "                            optimizer step, synchronised once (a step of N x B; same\n"
    "                            update as --batch-size N x B up to float rounding)\n"
    "  --normalize MEAN,STD      per-channel normalisation (x/255 - mean) / std: one pair\n"
    "                            for every channel or M0,M1,M2,S0,S1,S2 (saved; --init,\n"
    "                            --resume and eval use the checkpoint's by default)\n"
    "  --augment crop:P,flip     training only: random crop with P pixels of zero padding\n"
    "                            and/or horizontal flip, seeded by (seed, epoch, position):\n"
    "                            the same for any number of devices and ranks\n"
    "  --lr X                    learning rate (default: the optimizer's, 0.2 for sgd and\n"
    "                            momentum as d2l's LeNet, 0.01 adagrad, 0.001 adam and\n"
    "                            adamw as torch.optim's)\n"
    "  --weight-decay X          L2 penalty added to the gradient (default 0); adamw:\n"
    "                            decoupled, p *= 1 - lr * X before each update (default\n"
    "                            0.01, torch.optim.AdamW's; --weight-decay 0 for none)\n"
    "  --norm-weight-decay X     the weight decay of batch norm layers' weights and biases\n"
    "                            instead of --weight-decay (torchvision's recipes: 0)\n"
    "  --bias-weight-decay X     the weight decay of every bias (batch norm's too) instead\n"
    "                            of --weight-decay; both 0: timm's no decay for biases and\n"
    "                            norm layers\n"
    "  --optimizer NAME          sgd (default), momentum, adagrad, adam or adamw:\n"
    "                            torch.optim's SGD, SGD with momentum, Adagrad, Adam,\n"
    "                            AdamW, step for step\n"
    "  --momentum X              momentum: the factor, in (0, 1) (default 0.9)\n"
    "  --nesterov                momentum: Nesterov's variant\n"
    "  --beta1 X, --beta2 X      adam, adamw: the moment decays, in (0, 1) (default 0.9,\n"
    "                            0.999)\n"
    "  --eps X                   adam, adamw, adagrad: added to the denominator (default\n"
    "                            1e-8, 1e-10)\n"
    "  --lr-schedule NAME        constant (default), step (lr x gamma every\n"
    "                            --lr-step-epochs), cosine (from lr down to --lr-min\n"
    "                            over all the epochs) or exponential (lr x gamma every\n"
    "                            epoch, torch's ExponentialLR); updated every step\n"
    "  --lr-step-epochs N        step: epochs between decays (required)\n"
    "  --lr-gamma X              step: the decay factor, in (0, 1] (default 0.1);\n"
    "                            exponential: the factor per epoch (required)\n"
    "  --lr-min X                cosine: the final learning rate (default 0)\n"
    "  --warmup-epochs X         linear warm-up over X epochs (rounded to steps): step t\n"
    "                            of the first W uses (t + 1) / W of the scheduled lr\n"
    "  --warmup-steps N          the same, over N steps\n"
    "  --warmup-method NAME      linear (default) or constant (F, then 1): torchvision's\n"
    "                            --lr-warmup-method\n"
    "  --warmup-start F          the warm-up's factor at step 0, in (0, 1]: linear then\n"
    "                            uses F + (1 - F) t / W (torchvision's --lr-warmup-decay;\n"
    "                            default 1 / W, the (t + 1) / W above)\n"
    "  --warmup-sequential       the schedule starts after the warm-up (torchvision's\n"
    "                            SequentialLR; cosine over the epochs left) instead of\n"
    "                            being multiplied by it from step 0\n"
    "  --epochs N                passes over the training set (default 10; with --resume,\n"
    "                            the run's own)\n"
    "  --stop-after N            stop after epoch N of --epochs (a planned interruption:\n"
    "                            the schedule and checkpoint are those of the full run;\n"
    "                            continue later with --resume FILE alone)\n"
    "  --seed N                  seed of the initialisation, the shuffle, dropout and\n"
    "                            augmentation (default 0)\n"
    "  --limit N                 train on the first N training images only (default: all)\n"
    "  --devices N|LIST          devices to train on: a count (cpu:0 .. cpu:N-1) or a list\n"
    "                            like cpu:0,cpu:1, cuda:0,cuda:1 or cuda:0,cuda:0 (default:\n"
    "                            every GPU CUDA sees, else one CPU device per core)\n"
    "  --precision fp32|tf32|bf16  GPU devices: the arithmetic of matrix products and\n"
    "                            convolutions: fp32 (the default), tf32 (tensor-core math,\n"
    "                            products rounded to 10 mantissa bits) or bf16 (operands\n"
    "                            rounded to bf16 on tensor cores, sums in FP32; weights,\n"
    "                            optimizer, loss, batch norm and checkpoints stay FP32);\n"
    "                            tf32 and bf16 are refused on CPU devices\n"
    "  --tf32                    the same as --precision tf32\n"
    "  --channels-last on|off    GPU devices: keep 4-D activations channels-last (NHWC)\n"
    "                            inside the device (convolutions, bias, ReLU, batch norm,\n"
    "                            add, pooling, dropout); parameters, checkpoints and the\n"
    "                            CPU see NCHW as ever (default: on with --precision bf16\n"
    "                            when every convolution's channels are multiples of 8,\n"
    "                            else off: the faster side on an H200; refused on CPU)\n"
    "  --winograd                CPU devices: 5x5 convolutions with 8 or more channels in\n"
    "                            and out (LeNet's conv2) by Winograd F(3x3, 5x5): fewer\n"
    "                            multiplications, rounding errors about 5x im2col's (still\n"
    "                            FP32; default off: im2col); resume with it again\n"
    "  --allreduce chunked|naive gradient sum: chunked (default; every device sums 1/k of\n"
    "                            the gradient over shared memory and writes it to all\n"
    "                            replicas: a reduce-scatter + all-gather) or naive (device 0\n"
    "                            sums all, the book's code); ring is an alias of chunked\n"
    "  --sync allreduce|ps       how replicas agree: allreduce (default) or a parameter\n"
    "                            server (pushes gradients, pulls parameters; rank 0's)\n"
    "  --overlap on|off          chunked only: reduce gradient buckets (and across ranks, sum\n"
    "                            them with MPI) while backward is still running (default:\n"
    "                            on across ranks, where it hides the sync; off in one\n"
    "                            process, where for LeNet it measured no gain)\n"
    "  --cuda-graph on|off       one CUDA device: capture a training step once per batch\n"
    "                            shape as a CUDA graph and replay it, one launch a step\n"
    "                            (default on; the first line says when a run cannot be\n"
    "                            captured, and why); off: every kernel launched as made\n"
    "  --sync-batch-norm         batch norm uses the whole minibatch's statistics (all devices,\n"
    "                            all ranks) instead of each device's shard (default off)\n"
    "  --label-smoothing X       label smoothing of the training loss: the cross-entropy\n"
    "                            against (1 - X) onehot + X / classes, as\n"
    "                            torch.nn.CrossEntropyLoss(label_smoothing=X); X in [0, 1)\n"
    "                            (default 0: none; torchvision's recipes use 0.1). The loss\n"
    "                            printed is then the smoothed one (the test set's figure is\n"
    "                            its accuracy, as ever); saved, and --resume keeps it\n"
    "  --mixup-alpha A           Mixup (torchvision's --mixup-alpha): every step blends each\n"
    "                            input with the batch's previous one (the first with the\n"
    "                            last), lam x + (1 - lam) x', and trains toward the labels\n"
    "                            mixed alike, lam ~ Beta(A, A) drawn per step (0.2 in\n"
    "                            torchvision's recipes; default 0: off)\n"
    "  --cutmix-alpha A          CutMix likewise: a box of the previous input pasted in,\n"
    "                            lam the share left (recipes: 1.0); with both, each step\n"
    "                            one of the two. The whole batch of every device and rank,\n"
    "                            so the same for any number of them; the loss printed is\n"
    "                            the mixed targets', the accuracy the heavier label's;\n"
    "                            saved, and --resume keeps them\n"
    "  --random-erase P          torchvision's RandomErasing(p=P): each training example,\n"
    "                            with probability P, has a rectangle of 2% to 33% of its\n"
    "                            input (aspect 0.3 to 3.3) set to 0 after normalisation,\n"
    "                            before any mixing (recipes: 0.1 or 0.25; default 0: off);\n"
    "                            saved, and --resume keeps it\n"
    "  --ra-sampler              repeated augmentation (torchvision's --ra-sampler, Hoffer\n"
    "                            et al. 2020): every epoch the shuffle's first 1/N of the\n"
    "                            samples, each N times in a row, each copy augmented its\n"
    "                            own way; as many steps per epoch; saved, --resume keeps it\n"
    "  --ra-reps N               its copies of each sample, 2 to 64 (default 3)\n"
    "  --model-ema               keep a moving average of the model (its parameters and\n"
    "                            batch norm statistics), torchvision's --model-ema, and\n"
    "                            evaluate it after every epoch (\"test acc 0.850 (ema\n"
    "                            0.861)\", \"(top-5 0.929, ema 0.861)\" with top-5); saved\n"
    "                            in --save's checkpoint (eval --ema uses it)\n"
    "  --model-ema-steps N       steps between its updates (default 32)\n"
    "  --model-ema-decay D       its decay as torchvision's options give it (default\n"
    "                            0.99998): each update takes 1 - min(1, (1 - D) x batch x\n"
    "                            N / epochs) of the average and the rest of the model\n"
    "  --clip-grad-norm X        scale every step's summed gradient down to a total L2 norm\n"
    "                            of at most X before the update, as\n"
    "                            torch.nn.utils.clip_grad_norm_(params, X) (default: none);\n"
    "                            --overlap still sums during backward, the update waits for\n"
    "                            the norm; saved, and --resume keeps it\n"
    "  --comm-timeout SECONDS    under mpirun: end the job when another rank has not\n"
    "                            answered for this long (default 300; 0 = never); GPUs\n"
    "                            summing with NCCL: when a wait for the sums has not ended\n"
    "                            after this long (a stopped rank, a stuck GPU)\n"
    "  --threads-per-device N    BLAS threads of each device (default 1); dptrain's own\n"
    "                            kernels run on the device's thread\n"
    "  --metrics FILE            append one JSON object per epoch to FILE\n"
    "  --profile                 per-layer times: after 5 warm-up steps, time every layer's\n"
    "                            forward and backward on every device over 20 steps (CPU\n"
    "                            devices: the clock around each op; GPUs: CUDA events, read\n"
    "                            once after the window), and at the end print a table (mean\n"
    "                            ms per step, share of the step, and the share outside the\n"
    "                            layers: upload, sums, optimizer), even with --quiet; with\n"
    "                            --metrics also one line {\"profile\": ...} after the epochs'\n"
    "                            (off by default, and then one pointer test per op)\n"
    "  --profile-steps W,N       --profile after W warm-up steps over N steps (default 5,20)\n"
    "  --plot FILE.svg           write an SVG of loss and accuracy per epoch\n"
    "  --save FILE               write a checkpoint (safetensors: parameters, optimizer state,\n"
    "                            position) after every epoch, atomically\n"
    "  --save-best FILE          also write the checkpoint of each epoch whose test accuracy\n"
    "                            beats every earlier epoch's (Keras' save_best_only): FILE\n"
    "                            holds the run's best epoch (a resumed run's earlier epochs\n"
    "                            count: checkpoints record the best so far); another file\n"
    "                            than --save's\n"
    "  --early-stop N            stop after an epoch N epochs past the run's best test\n"
    "                            accuracy (Keras' EarlyStopping(patience=N); --save-best\n"
    "                            keeps the best epoch's checkpoint); saved, and --resume\n"
    "                            keeps it\n"
    "  --save-every-steps N      also save --save every N steps inside an epoch (with the\n"
    "                            loader position: --resume continues exactly)\n"
    "  --log-every-steps N       also print a line every N steps inside an epoch: the epoch's\n"
    "                            loss and train acc so far (all devices and ranks), lr,\n"
    "                            images/sec since the last line and the epoch's time left\n"
    "                            (torchvision's --print-freq; for logs: on a terminal it\n"
    "                            replaces the progress bar)\n"
    "  --resume FILE             continue the run that saved FILE, as it was saved: every\n"
    "                            option not given is the checkpoint's (--model, the optimizer\n"
    "                            and its options, the lr schedule and its options, --epochs,\n"
    "                            --batch-size, --accumulate, --seed, --limit, --augment,\n"
    "                            --sync-batch-norm, --label-smoothing, --clip-grad-norm,\n"
    "                            --mixup-alpha, --cutmix-alpha, --random-erase, --early-stop,\n"
    "                            --ra-sampler, --ra-reps,\n"
    "                            --normalize, --freeze, --transform, --interpolation,\n"
    "                            --auto-augment, --ra-magnitude, --color-jitter, --holdout,\n"
    "                            --data; not\n"
    "                            --devices, --threads-per-device, --save: give --save FILE\n"
    "                            to go on saving there; a line says what was taken); on the same\n"
    "                            devices it ends bit for bit where the uninterrupted run\n"
    "                            would. --epochs counts from the start; a given --batch-size,\n"
    "                            --seed, --limit, lr schedule (with cosine, --epochs),\n"
    "                            --label-smoothing, interpolation, mixing, erasing,\n"
    "                            auto-augmentation or color jitter other than the saved one\n"
    "                            is refused,\n"
    "                            another --lr, optimizer option or --clip-grad-norm warned\n"
    "                            about\n"
    "  --init FILE               a new run from a checkpoint's parameters and batch norm\n"
    "                            statistics (not its optimizer, step, schedule or label\n"
    "                            smoothing: this run's options say those); a last\n"
    "                            linear layer (the last conv without one: SqueezeNet) with\n"
    "                            another output count than the file's starts afresh (a\n"
    "                            new head); refused with --resume\n"
    "  --fresh-head              with --init: the head starts afresh even\n"
    "                            with the file's output count (other classes, as many)\n"
    "  --freeze LAYERS           layers that do not train, comma-separated names or\n"
    "                            prefixes (conv1,layer1: also layer1.0.conv1): no gradient,\n"
    "                            no update, batch norm on its running statistics; saved,\n"
    "                            and --resume keeps it\n"
    "  --freeze-backbone         --freeze every layer but the head (the last linear layer,\n"
    "                            or the last conv without one):\n"
    "                            conv1,bn1,layer1,..,layer4 of a ResNet, features of\n"
    "                            MobileNetV2 and EfficientNet, features,classifier.0 of\n"
    "                            MobileNetV3 and ConvNeXt, stem,trunk_output of a RegNet,\n"
    "                            features of a DenseNet or a SqueezeNet\n"
    "  --num-classes N           a model file's head (last [linear], or [conv] without one)\n"
    "                            with N outputs,\n"
    "                            e.g. models/resnet50-imagenet.cfg's 1000 made your 5 (with\n"
    "                            --init: a new head); saved with the model's text\n"
    "  --image-size N|HxW        a model file's input height and width (its [net]), e.g.\n"
    "                            64 to fine-tune a 224 network at 64 x 64 (networks with\n"
    "                            global average pooling take any size); saved likewise\n"
    "  --val-image-size N|HxW    every epoch's test at this input size (FixRes: torchvision's\n"
    "                            --val-crop-size), the test images resized as --resize says\n"
    "                            (default 256/224 of it) and center-cropped to it; image\n"
    "                            folders and networks with global average pooling only;\n"
    "                            saved: eval and predict test at it (default: the model's)\n"
    "  --quiet                   print only the final line\n"
    "  --help                    show this help\n";

dp_status_t train_options_parse(int argc, char **argv, int first, train_options_t *o, int *help) {
    *o = (train_options_t){
        .data_dir = DP_DEFAULT_DATA_DIR,
        .batch_size = 0, /* not given: 256, set after parsing */
        .lr = NAN, /* the optimizer's default (train_default_lr) */
        .weight_decay = NAN, /* likewise (train_default_weight_decay); an explicit 0 is 0 */
        .norm_weight_decay = NAN, .bias_weight_decay = NAN, /* not given: the weight decay's */
        .model_ema_steps = 32, .model_ema_decay = 0.99998, /* torchvision's reference */
        .ra_reps = 3,                                      /* torchvision's --ra-reps */
        .epochs = 10,
        .seed = 0,
        .threads_per_device = 1,
        .comm_timeout = 300.0f,
        .optimizer = "sgd",
        .lr_schedule = "constant", .warmup_method = "linear",
        .momentum = NAN, .beta1 = NAN, .beta2 = NAN, .eps = NAN, .lr_gamma = NAN, .warmup_start = NAN,
        .data = cli_data_defaults(),
    };
    option_t options[72 + CLI_DATA_OPTIONS] = {
        {"model", OPT_STRING, &o->model, 0, 0},
        {"data", OPT_STRING, &o->data_dir, 0, 0},
        {"batch-size", OPT_INT, &o->batch_size, 1, 1 << 24},
        {"lr", OPT_FLOAT, &o->lr, 0, 0},
        {"weight-decay", OPT_FLOAT, &o->weight_decay, 0, 0},
        {"norm-weight-decay", OPT_FLOAT, &o->norm_weight_decay, 0, 0},
        {"bias-weight-decay", OPT_FLOAT, &o->bias_weight_decay, 0, 0},
        {"optimizer", OPT_STRING, &o->optimizer, 0, 0},
        {"momentum", OPT_FLOAT, &o->momentum, 0, 0},
        {"nesterov", OPT_FLAG, &o->nesterov, 0, 0},
        {"beta1", OPT_FLOAT, &o->beta1, 0, 0},
        {"beta2", OPT_FLOAT, &o->beta2, 0, 0},
        {"eps", OPT_FLOAT, &o->eps, 0, 0},
        {"lr-schedule", OPT_STRING, &o->lr_schedule, 0, 0},
        {"lr-step-epochs", OPT_INT, &o->lr_step_epochs, 1, 1000000},
        {"lr-gamma", OPT_FLOAT, &o->lr_gamma, 0, 0},
        {"lr-min", OPT_FLOAT, &o->lr_min, 0, 0},
        {"warmup-epochs", OPT_FLOAT, &o->warmup_epochs, 0, 0},
        {"warmup-steps", OPT_INT, &o->warmup_steps, 1, 1 << 30},
        {"warmup-method", OPT_STRING, &o->warmup_method, 0, 0},
        {"warmup-start", OPT_FLOAT, &o->warmup_start, 0, 0},
        {"warmup-sequential", OPT_FLAG, &o->warmup_sequential, 0, 0},
        {"epochs", OPT_INT, &o->epochs, 1, 1000000},
        {"stop-after", OPT_INT, &o->stop_after, 1, 1000000},
        {"seed", OPT_UINT64, &o->seed, 0, 0},
        {"limit", OPT_INT, &o->limit, 1, 1 << 30},
        {"threads-per-device", OPT_INT, &o->threads_per_device, 1, 1024},
        {"devices", OPT_STRING, &o->devices, 0, 0},
        {"allreduce", OPT_STRING, &o->allreduce, 0, 0},
        {"overlap", OPT_STRING, &o->overlap, 0, 0},
        {"cuda-graph", OPT_STRING, &o->cuda_graph, 0, 0},
        {"sync", OPT_STRING, &o->sync, 0, 0},
        {"comm-timeout", OPT_FLOAT, &o->comm_timeout, 0, 0},
        {"sync-batch-norm", OPT_FLAG, &o->sync_batch_norm, 0, 0},
        {"label-smoothing", OPT_FLOAT, &o->label_smoothing, 0, 0},
        {"clip-grad-norm", OPT_FLOAT, &o->clip_grad_norm, 0, 0},
        {"mixup-alpha", OPT_FLOAT, &o->mixup_alpha, 0, 0},
        {"cutmix-alpha", OPT_FLOAT, &o->cutmix_alpha, 0, 0},
        {"random-erase", OPT_FLOAT, &o->random_erase, 0, 0},
        {"model-ema", OPT_FLAG, &o->model_ema, 0, 0},
        {"model-ema-steps", OPT_INT, &o->model_ema_steps, 1, 1000000000},
        {"model-ema-decay", OPT_DOUBLE, &o->model_ema_decay, 0, 0},
        {"metrics", OPT_STRING, &o->metrics_path, 0, 0},
        {"plot", OPT_STRING, &o->plot_path, 0, 0},
        {"save", OPT_STRING, &o->save_path, 0, 0},
        {"save-best", OPT_STRING, &o->save_best_path, 0, 0},
        {"early-stop", OPT_INT, &o->early_stop, 1, 1000000},
        {"ra-sampler", OPT_FLAG, &o->ra_sampler, 0, 0},
        {"ra-reps", OPT_INT, &o->ra_reps, 2, DP_RA_REPS_LIMIT},
        {"resume", OPT_STRING, &o->resume_path, 0, 0},
        {"quiet", OPT_FLAG, &o->quiet, 0, 0},
        {"normalize", OPT_STRING, &o->normalize, 0, 0},
        {"augment", OPT_STRING, &o->augment, 0, 0},
        {"accumulate", OPT_INT, &o->accumulate, 1, 1 << 20},
        {"save-every-steps", OPT_INT, &o->save_every_steps, 1, 1 << 30},
        {"log-every-steps", OPT_INT, &o->log_every_steps, 1, 1 << 30},
        {"tf32", OPT_FLAG, &o->tf32, 0, 0},
        {"precision", OPT_STRING, &o->precision_text, 0, 0},
        {"channels-last", OPT_STRING, &o->channels_last_text, 0, 0},
        {"winograd", OPT_FLAG, &o->winograd, 0, 0},
        {"profile", OPT_FLAG, &o->profile, 0, 0},
        {"profile-steps", OPT_STRING, &o->profile_steps, 0, 0},
        {"init", OPT_STRING, &o->init_path, 0, 0},   /* train_init.c and fit.h's init_path */
        {"fresh-head", OPT_FLAG, &o->fresh_head, 0, 0},
        {"freeze", OPT_STRING, &o->freeze, 0, 0},
        {"freeze-backbone", OPT_FLAG, &o->freeze_backbone, 0, 0},
        {"num-classes", OPT_INT, &o->num_classes, 1, 1 << 24},
        {"image-size", OPT_STRING, &o->image_size, 0, 0},
        {"val-image-size", OPT_STRING, &o->val_image_size, 0, 0},
    };
    int used = 0;
    while (options[used].name) used++;
    cli_data_option_entries(&o->data, 1, options, &used); /* data_options.c's: image folders */
    options[used] = (option_t){0};
    unsigned char given[sizeof options / sizeof options[0]];
    dp_status_t status = options_parse_given("train", options, argc, argv, first, help, given);
    for (int i = 0; i < used; i++) /* (offsets: a copy of *o answers train_option_given as well) */
        if (given[i]) o->given[o->num_given++] = (size_t)((const char *)options[i].target - (const char *)o);
    o->batch_size_given = o->batch_size > 0;
    if (!o->batch_size_given) o->batch_size = 256;
    return status;
}

int train_option_given(const train_options_t *o, const void *field) {
    const size_t offset = (size_t)((const char *)field - (const char *)o);
    for (int i = 0; i < o->num_given; i++)
        if (o->given[i] == offset) return 1;
    return 0;
}

/* Fails unless the directory that will hold `path` exists and is writable,
 * so a bad --metrics or --plot is reported before training, not after. */
static dp_status_t check_output_path(const char *option, const char *path) {
    char what[32];
    snprintf(what, sizeof what, "--%s", option);
    return dp_file_check_writable(what, path);
}

/* --plot writes SVG: a name that says another format is refused (an image
 * viewer would not open it); a name without an extension is fine. */
static dp_status_t check_plot_name(const char *path) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const char *dot = strrchr(base, '.');
    if (dot && dot != base && strcasecmp(dot, ".svg") != 0)
        return dp_fail(DP_ERR_ARG, "train: --plot %s: the plot is an SVG file (name it %.*s.svg)", path,
                       (int)(dot - path), path);
    return DP_OK;
}

/* An optional positive option: NAN (not given) -> 0, the library's default;
 * an explicit 0 would silently mean the default too, so it is an error. */
static dp_status_t optional_positive(const char *name, float value, float *out) {
    if (value == 0.0f) return dp_fail(DP_ERR_ARG, "train: --%s must be > 0, found 0", name);
    *out = isnan(value) ? 0.0f : value;
    return DP_OK;
}

/* The same for a factor in (0, 1) (momentum, the betas; the library
 * takes 0 for its default). */
static dp_status_t optional_fraction(const char *name, float value, float *out) {
    if (!isnan(value) && !(value > 0.0f && value < 1.0f))
        return dp_fail(DP_ERR_ARG, "train: --%s must be in (0, 1), found %g", name, value);
    *out = isnan(value) ? 0.0f : value;
    return DP_OK;
}

/* The learning rate without --lr: the optimizer's own default, as
 * torch.optim 1.13 has it (Adam and AdamW 0.001, Adagrad 0.01); SGD has
 * none there, so d2l's 0.2 (LeNet's, the book's settings) for sgd and
 * momentum. */
float train_default_lr(dp_optim_kind_t kind) {
    return kind == DP_OPTIM_ADAM || kind == DP_OPTIM_ADAMW ? 0.001f : kind == DP_OPTIM_ADAGRAD ? 0.01f : 0.2f;
}

/* The weight decay without --weight-decay, as torch.optim 1.13 has it:
 * AdamW's 0.01 (its decoupled decay is on by default, the setting its
 * fine-tuning recipes start from), 0 for every other kind. */
float train_default_weight_decay(dp_optim_kind_t kind) { return kind == DP_OPTIM_ADAMW ? 0.01f : 0.0f; }

/* --optimizer and its options -> config->optim (o->lr: the optimizer's
 * default when not given); --lr-schedule and its options -> *schedule. */
static dp_status_t optimizer_options(train_options_t *o, dp_optim_config_t *optim,
                                     dp_lr_schedule_t *schedule) {
    int kind = dp_optim_kind_from_name(o->optimizer);
    if (kind < 0)
        return dp_fail(DP_ERR_ARG, "train: --optimizer: '%s' is not sgd, momentum, adagrad, adam or adamw",
                       o->optimizer);
    if (isnan(o->lr)) o->lr = train_default_lr((dp_optim_kind_t)kind); /* --lr not given: the optimizer's own */
    if (isnan(o->weight_decay)) o->weight_decay = train_default_weight_decay((dp_optim_kind_t)kind); /* likewise */
    *optim = (dp_optim_config_t){.kind = (dp_optim_kind_t)kind, .lr = o->lr, .weight_decay = o->weight_decay,
                                 .nesterov = o->nesterov,
                                 .has_norm_weight_decay = !isnan(o->norm_weight_decay),
                                 .norm_weight_decay = isnan(o->norm_weight_decay) ? 0.0f : o->norm_weight_decay,
                                 .has_bias_weight_decay = !isnan(o->bias_weight_decay),
                                 .bias_weight_decay = isnan(o->bias_weight_decay) ? 0.0f : o->bias_weight_decay};
    DP_TRY(optional_fraction("momentum", o->momentum, &optim->momentum));
    DP_TRY(optional_fraction("beta1", o->beta1, &optim->beta1));
    DP_TRY(optional_fraction("beta2", o->beta2, &optim->beta2));
    DP_TRY(optional_positive("eps", o->eps, &optim->eps));
    DP_TRY(dp_optim_config_check(optim));
    kind = dp_lr_schedule_kind_from_name(o->lr_schedule);
    if (kind < 0)
        return dp_fail(DP_ERR_ARG, "train: --lr-schedule: '%s' is not constant, step, cosine or exponential",
                       o->lr_schedule);
    if (kind == DP_LR_STEP && o->lr_step_epochs == 0)
        return dp_fail(DP_ERR_ARG, "train: --lr-schedule step needs --lr-step-epochs N");
    if (kind == DP_LR_EXPONENTIAL && isnan(o->lr_gamma))
        return dp_fail(DP_ERR_ARG, "train: --lr-schedule exponential needs --lr-gamma X (the factor per epoch)");
    const int method = dp_lr_warmup_method_from_name(o->warmup_method);
    if (method < 0)
        return dp_fail(DP_ERR_ARG, "train: --warmup-method: '%s' is not linear or constant", o->warmup_method);
    if (!isnan(o->warmup_start) && !(o->warmup_start > 0.0f && o->warmup_start <= 1.0f))
        return dp_fail(DP_ERR_ARG, "train: --warmup-start must be in (0, 1], found %g", o->warmup_start);
    if ((method != DP_WARMUP_LINEAR || !isnan(o->warmup_start) || o->warmup_sequential) &&
        o->warmup_epochs == 0.0f && o->warmup_steps == 0)
        return dp_fail(DP_ERR_ARG, "train: --warmup-method, --warmup-start and --warmup-sequential need "
                       "--warmup-epochs X or --warmup-steps N, found neither");
    float gamma = 0.0f;
    DP_TRY(optional_positive("lr-gamma", o->lr_gamma, &gamma));
    *schedule = (dp_lr_schedule_t){.kind = (dp_lr_schedule_kind_t)kind, .lr = dp_float_decimal(o->lr),
                                   .step_epochs = o->lr_step_epochs, .gamma = dp_float_decimal(gamma),
                                   .total_epochs = kind == DP_LR_COSINE ? o->epochs : 0,
                                   .min_lr = dp_float_decimal(o->lr_min),
                                   .warmup_epochs = dp_float_decimal(o->warmup_epochs),
                                   .warmup_steps = (uint64_t)o->warmup_steps,
                                   .warmup_method = (dp_lr_warmup_method_t)method,
                                   .warmup_start = isnan(o->warmup_start) ? 0.0 : dp_float_decimal(o->warmup_start),
                                   .warmup_sequential = o->warmup_sequential};
    return dp_lr_schedule_check(schedule);
}

/* --allreduce, --sync, --overlap and --cuda-graph -> *s; --overlap on
 * where nothing can overlap is an error (the sum would wait for the whole
 * backward pass all the same), and so is --allreduce under --sync ps
 * (the server sums: the choice would be silently unused). */
static dp_status_t sync_options(const train_options_t *o, int ranks, train_settings_t *s) {
    s->allreduce = DP_ALLREDUCE_RING; /* chunked; "ring" is its old name, kept as an alias */
    if (o->allreduce && strcmp(o->allreduce, "naive") == 0)
        s->allreduce = DP_ALLREDUCE_NAIVE;
    else if (o->allreduce && strcmp(o->allreduce, "chunked") != 0 && strcmp(o->allreduce, "ring") != 0)
        return dp_fail(DP_ERR_ARG, "train: --allreduce: '%s' is not ring or naive (or chunked, of which ring is an "
                       "alias)", o->allreduce);
    s->sync = DP_SYNC_ALLREDUCE;
    if (o->sync && strcmp(o->sync, "ps") == 0)
        s->sync = DP_SYNC_PS;
    else if (o->sync && strcmp(o->sync, "allreduce") != 0)
        return dp_fail(DP_ERR_ARG, "train: --sync: '%s' is not allreduce or ps", o->sync);
    s->overlap = ranks > 1; /* the default: on under mpirun, off in one process */
    if (o->overlap && strcmp(o->overlap, "on") != 0 && strcmp(o->overlap, "off") != 0)
        return dp_fail(DP_ERR_ARG, "train: --overlap: '%s' is not on or off", o->overlap);
    if (o->overlap) s->overlap = strcmp(o->overlap, "on") == 0;
    if (o->overlap && s->overlap && s->sync == DP_SYNC_PS)
        return dp_fail(DP_ERR_ARG, "train: --overlap on: --sync ps pushes the whole gradient after the backward "
                       "pass, nothing overlaps it (drop --overlap, or use --sync allreduce)");
    if (o->allreduce && s->sync == DP_SYNC_PS)
        return dp_fail(DP_ERR_ARG, "train: --allreduce %s: --sync ps sums the gradients on its server device, no "
                       "allreduce runs (drop --allreduce, or use --sync allreduce)", o->allreduce);
    if (o->overlap && s->overlap && s->allreduce == DP_ALLREDUCE_NAIVE)
        return dp_fail(DP_ERR_ARG, "train: --overlap on: --allreduce naive sums on device 0 after the backward "
                       "pass, nothing overlaps it (drop --overlap, or use --allreduce chunked)");
    if (o->cuda_graph && strcmp(o->cuda_graph, "on") != 0 && strcmp(o->cuda_graph, "off") != 0)
        return dp_fail(DP_ERR_ARG, "train: --cuda-graph: '%s' is not on or off", o->cuda_graph);
    return DP_OK;
}

/* --precision, --tf32 and --channels-last's values (the devices check
 * what they can do: devices.c). */
static dp_status_t arithmetic_options(train_options_t *o) {
    dp_precision_t precision = o->tf32 ? DP_PRECISION_TF32 : DP_PRECISION_FP32;
    if (o->precision_text) DP_TRY(cli_parse_precision("train", o->precision_text, &precision));
    if (o->tf32 && precision != DP_PRECISION_TF32)
        return dp_fail(DP_ERR_ARG, "train: --tf32 is --precision tf32, and --precision says %s: give one",
                       o->precision_text);
    o->precision = (int)precision;
    if (o->channels_last_text && strcmp(o->channels_last_text, "on") != 0 &&
        strcmp(o->channels_last_text, "off") != 0)
        return dp_fail(DP_ERR_ARG, "train: --channels-last: '%s' is not on or off", o->channels_last_text);
    o->channels_last = o->channels_last_text && strcmp(o->channels_last_text, "on") == 0; /* the default: train.c */
    return DP_OK;
}

/* --augment and --normalize's texts (the data checks the channels). */
static dp_status_t data_options(const train_options_t *o, train_settings_t *s) {
    char why[1024];
    if (o->augment && dp_augment_parse(o->augment, &s->augment) != DP_OK) {
        snprintf(why, sizeof why, "%s", dp_error_message());
        return dp_fail(DP_ERR_ARG, "train: --%s", why);
    }
    if (o->normalize && dp_normalize_parse(o->normalize, &s->norm_n, s->norm_mean, s->norm_std) != DP_OK) {
        snprintf(why, sizeof why, "%s", dp_error_message());
        return dp_fail(DP_ERR_ARG, "train: --normalize: %s", why);
    }
    return DP_OK;
}

dp_status_t train_options_check(train_options_t *o, int ranks, int speaks, train_settings_t *s) {
    *s = (train_settings_t){.profile_warmup = DP_PROFILE_DEFAULT_WARMUP, .profile_window = DP_PROFILE_DEFAULT_WINDOW};
    if (o->save_every_steps && !o->save_path)
        return dp_fail(DP_ERR_ARG, "train: --save-every-steps needs --save FILE (where to write the checkpoints)");
    if (o->fresh_head && !o->init_path)
        return dp_fail(DP_ERR_ARG, "train: --fresh-head needs --init FILE (the checkpoint whose last layer it leaves "
                       "out)");
    DP_TRY(arithmetic_options(o));
    if (!isnan(o->lr) && !(o->lr > 0.0f)) return dp_fail(DP_ERR_ARG, "train: --lr must be positive, found %g", o->lr);
    if (o->weight_decay < 0.0f)
        return dp_fail(DP_ERR_ARG, "train: --weight-decay must be >= 0, found %g", o->weight_decay);
    if (o->norm_weight_decay < 0.0f)
        return dp_fail(DP_ERR_ARG, "train: --norm-weight-decay must be >= 0, found %g", o->norm_weight_decay);
    if (o->bias_weight_decay < 0.0f)
        return dp_fail(DP_ERR_ARG, "train: --bias-weight-decay must be >= 0, found %g", o->bias_weight_decay);
    if (!(o->label_smoothing >= 0.0f && o->label_smoothing < 1.0f))
        return dp_fail(DP_ERR_ARG, "train: --label-smoothing must be in [0, 1) (0: none, 0.1 as torchvision's "
                       "recipes), found %g", o->label_smoothing);
    if (o->model_ema_steps < 1)
        return dp_fail(DP_ERR_ARG, "train: --model-ema-steps must be >= 1 (steps between the average's updates), "
                       "found %d", o->model_ema_steps);
    if (!(o->model_ema_decay >= 0.0 && o->model_ema_decay <= 1.0))
        return dp_fail(DP_ERR_ARG, "train: --model-ema-decay must be in [0, 1] (torchvision's default 0.99998), "
                       "found %g", o->model_ema_decay);
    if (!o->model_ema && (train_option_given(o, &o->model_ema_steps) || train_option_given(o, &o->model_ema_decay)))
        return dp_fail(DP_ERR_ARG, "train: --model-ema-%s without --model-ema (which keeps the average)",
                       train_option_given(o, &o->model_ema_steps) ? "steps" : "decay");
    const dp_mix_config_t mix = {.mixup_alpha = o->mixup_alpha, .cutmix_alpha = o->cutmix_alpha};
    DP_TRY(dp_mix_check(&mix, "train: --"));
    DP_TRY(dp_random_erase_check(o->random_erase, "train: --random-erase"));
    if (!o->ra_sampler && train_option_given(o, &o->ra_reps))
        return dp_fail(DP_ERR_ARG, "train: --ra-reps %d without --ra-sampler (which repeats the samples)", o->ra_reps);
    if (train_option_given(o, &o->clip_grad_norm) &&
        !(o->clip_grad_norm > 0.0f && o->clip_grad_norm <= DP_CLIP_MAX_NORM_LIMIT))
        return dp_fail(DP_ERR_ARG, "train: --clip-grad-norm must be a norm > 0 and at most %g (1 or 5 are usual), "
                       "found %g", (double)DP_CLIP_MAX_NORM_LIMIT, o->clip_grad_norm);
    if (o->profile_steps) DP_TRY(train_profile_parse(o->profile_steps, &s->profile_warmup, &s->profile_window));
    if (!o->profile && !o->profile_steps) s->profile_window = 0; /* off */
    s->lr_default = isnan(o->lr);
    s->weight_decay_default = isnan(o->weight_decay);
    DP_TRY(optimizer_options(o, &s->optim, &s->schedule));
    DP_TRY(sync_options(o, ranks, s));
    if (o->metrics_path) DP_TRY(check_output_path("metrics", o->metrics_path));
    if (o->plot_path) DP_TRY(check_plot_name(o->plot_path));
    if (o->plot_path) DP_TRY(check_output_path("plot", o->plot_path));
    if (o->save_path) DP_TRY(check_output_path("save", o->save_path));
    if (o->save_best_path) DP_TRY(check_output_path("save-best", o->save_best_path));
    if (o->save_best_path && o->save_path && strcmp(o->save_best_path, o->save_path) == 0)
        return dp_fail(DP_ERR_ARG, "train: --save-best %s is --save's file: the best epoch's checkpoint needs a file "
                       "of its own", o->save_path);
    if (o->accumulate < 1) o->accumulate = 1;
    if ((int64_t)o->batch_size * o->accumulate > (1 << 24))
        return dp_fail(DP_ERR_ARG, "train: --batch-size %d x --accumulate %d is more than %d examples per step",
                       o->batch_size, o->accumulate, 1 << 24);
    DP_TRY(data_options(o, s));
    if (o->stop_after >= o->epochs)
        train_warn(speaks, "--stop-after %d is not before --epochs %d: the run trains to its end (epoch %d)",
                   o->stop_after, o->epochs, o->epochs);
    return DP_OK;
}

void train_check_warmup(const train_options_t *o, const dp_lr_schedule_t *schedule, int train_count, int step_batch,
                        int speaks) {
    const int given_epochs = train_option_given(o, &o->warmup_epochs) && o->warmup_epochs > 0.0f;
    if (!given_epochs && !(train_option_given(o, &o->warmup_steps) && o->warmup_steps > 0)) return;
    const uint64_t per_epoch = (uint64_t)(train_count / step_batch + (train_count % step_batch != 0));
    const uint64_t warmup = dp_lr_schedule_warmup_steps(schedule, per_epoch), total = per_epoch * (uint64_t)o->epochs;
    char option[64];
    if (given_epochs) snprintf(option, sizeof option, "--warmup-epochs %g", o->warmup_epochs);
    else snprintf(option, sizeof option, "--warmup-steps %d", o->warmup_steps);
    if (warmup == 0)
        train_warn(speaks, "%s rounds to no step (%llu steps an epoch): the run has no warm-up", option,
                   (unsigned long long)per_epoch);
    else if (warmup > total)
        train_warn(speaks, "%s is %llu steps, more than the run's %llu (%d epoch%s of %llu): the learning rate never "
                   "reaches its scheduled value", option, (unsigned long long)warmup, (unsigned long long)total,
                   o->epochs, o->epochs == 1 ? "" : "s", (unsigned long long)per_epoch);
}

void train_check_limit(const train_options_t *o, int train_count, int speaks) {
    if (o->limit > train_count && train_option_given(o, &o->limit)) /* (a resume's own: dp_fit compares it) */
        train_warn(speaks, "--limit %d is more than the %d training images of %s: training on all %d", o->limit,
                   train_count, o->data_dir, train_count);
}
