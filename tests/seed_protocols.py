"""What each shipped seed grid reproduces, value by value, and where its seed says it
(tests/test_seed_grids.py checks the grids against this table).

The seeds are the Chinese documents in the project's seeds directory ($DLBENCH_SEEDS, by default
shared/seeds beside the checkout), named here by file. A quote is the seed's own words, whitespace aside: the
seeds' text is extracted from web pages and a PDF that break lines and space characters apart.
A value a seed does not state has no quote; its note, beginning "Not stated", says what the
grid uses instead and why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# shared/ lies beside the checkout (the developers' machines and CI alike).
SEEDS = Path(os.environ.get("DLBENCH_SEEDS", Path(__file__).resolve().parents[2] / "shared" / "seeds"))
NOT_STATED = "Not stated"


@dataclass(frozen=True)
class Cited:
    value: object
    quotes: tuple[str, ...] = ()
    note: str = ""


def cite(value, *quotes: str, note: str = "") -> Cited:
    return Cited(value, quotes, note)


@dataclass(frozen=True)
class SeedStudy:
    """One seed and the grid file that reproduces it. Batches, data kinds and strategies are
    per model (strategies per framework too: the ones a cell on more than one device uses);
    `not_run` holds rules, written as a grid's exclude rules, of cells the seed did not run."""

    seed: str
    grid: str
    warmup_steps: Cited
    measured_steps: Cited
    repeats: Cited
    statistic: Cited
    frameworks: Cited
    models: Cited
    precision: Cited
    scales: Cited
    image_size: Cited  # {image model: pixels}
    seq_len: Cited  # {text model: tokens}
    batches: Cited  # {model: {precision: per-device batches}}
    data: Cited  # {model: data kinds}
    strategies: Cited  # {framework: {model: strategies}}
    not_run: tuple[Cited, ...] = ()
    # The rows of config/references/published_throughput.csv the grid compares with: its
    # references.hardware, and each published strategy's name in our terms (None: one no
    # framework plug-in offers, its rows reproduced by no cell, with the reason).
    hardware: str = ""
    published_strategies: dict | None = None
    not_reproduced: tuple[Cited, ...] = ()

    @property
    def cited(self) -> list[Cited]:
        return [v for v in vars(self).values() if isinstance(v, Cited)] + [*self.not_run, *self.not_reproduced]


IMAGE_SIZE_UNSTATED = (
    f"{NOT_STATED} beyond ImageNet: the grid leaves run.image_size at the schema's 0, the model's "
    "own ImageNet input (224 px), as the seed's reference implementations train"
)
FP32_UNSTATED = f"{NOT_STATED}: the seed names no mixed precision; the grid trains fp32, the schema's default"

TF_CNN_MODELS = ("inception_v3", "resnet50", "resnet152", "vgg16", "alexnet")
TF_CNN_PS_CPU = ("inception_v3", "resnet50", "resnet152")

TF_CNN_BENCHMARKS = SeedStudy(
    seed="000_c58c5ca42b690cb8.txt",
    grid="config/grids/tf_cnn_benchmarks.yaml",
    warmup_steps=cite(10, "每次测试,都要完成10个预热步骤"),
    measured_steps=cite(100, "然后对接下来的100个步骤进行平均"),
    repeats=cite(5, "每个测试运行五次"),
    statistic=cite("mean", "每个测试运行五次,然后平均一下时间"),
    frameworks=cite(("tensorflow",), "TensorFlow的多平台基准测试"),
    models=cite(
        TF_CNN_MODELS,
        "InceptionV3[2]、ResNet-50[3]、ResNet-152[4]、VGG16[5]和AlexNet[6]使用ImageNet[7]数据集进行测试",
    ),
    precision=cite(
        ("fp32",),
        note=f"{FP32_UNSTATED} (tf_cnn_benchmarks' --use_fp16 is off unless asked; the published rows say fp32)",
    ),
    scales=cite(
        ("1x1", "1x2", "1x4", "1x8"),
        "使用 NVIDIA® DGX-1™ (NVIDIA® Tesla® P100) 进行训练",
        "GPUs InceptionV3 ResNet-50 ResNet-152 AlexNet VGG16",
        "8 1131 1734 716 17822 1081",
        note="the DGX-1 platform only (references.hardware); one node of 1, 2, 4, 8 GPUs",
    ),
    image_size=cite(
        {"inception_v3": 299, "resnet50": 224, "resnet152": 224, "vgg16": 224, "alexnet": 224},
        "它被设置为与ImageNet的每个模型预期的数据相同的形状",
        note="each model's own ImageNet input: run.image_size 0 (299 px for InceptionV3, 224 px for the rest)",
    ),
    seq_len=cite({}, note=f"{NOT_STATED}: the study trains no text model"),
    batches=cite(
        {m: {"fp32": (512,) if m == "alexnet" else (32, 64)} for m in TF_CNN_MODELS},
        "Batch size per GPU 64 64 64 512 64",
        "除下表所列的批量大小外,InceptionV3、ResNet-50、ResNet-152和VGG16使用批量大小为32进行测试",
    ),
    data=cite(
        {m: ("synthetic", "real") for m in TF_CNN_MODELS},
        "大部分测试使用了合成数据和真实数据",
        note="AlexNet on 8 GPUs with real data ran but is not published (排除了在8个GPU上使用真实数据训练的AlexNet,"
        "因为它将输入管线最大化了): the grid runs it, its cell compared with nothing",
    ),
    strategies=cite(
        {"tensorflow": {m: ("replicated_pscpu" if m in TF_CNN_PS_CPU else "replicated_nccl",) for m in TF_CNN_MODELS}},
        "InceptionV3 parameter_server cpu",
        "ResNet50 parameter_server cpu",
        "ResNet152 parameter_server cpu",
        "AlexNet replicated (with NCCL) n/a",
        "VGG16 replicated (with NCCL) n/a",
        note="tf_cnn_benchmarks' one-process parameter_server with its variables on the CPU is our "
        "replicated_pscpu (gradients reduced on the CPU, in one process); our parameter_server is TF2's "
        "ParameterServerStrategy, server processes and a coordinator, which the seed did not run",
    ),
    hardware="DGX-1",
    published_strategies={"parameter_server/cpu": "replicated_pscpu", "replicated/nccl": "replicated_nccl"},
)

PADDLE_VGG16 = SeedStudy(
    seed="002_4cb15c4f620edaec.txt",
    grid="config/grids/paddle_vgg16.yaml",
    warmup_steps=cite(20, "我们的测试方法是忽略前20个step"),
    measured_steps=cite(100, "然后取后面100个step的平均吞吐作为单次任务的训练吞吐"),
    repeats=cite(7, "我们会利用相同的配置进行7次运行"),
    statistic=cite("median", "我们会利用相同的配置进行7次运行,取中值"),
    frameworks=cite(("paddle",), "Paddle Github Commit"),
    models=cite(("vgg16",), "我们提供VGG16在ImageNet数据集上的性能基准"),
    precision=cite(
        ("fp32", "amp"), "单位:Images/s,使用精度FP32", "使用自动混合精度Automatic Mixed Precision(AMP)进行训练"
    ),
    scales=cite(("1x1", "1x8", "2x8", "4x8"), "评价 1 x 1, 1 x 8, 2 x 8, 4 x 8情况下的性能基准"),
    image_size=cite({"vgg16": 224}, note=IMAGE_SIZE_UNSTATED),
    seq_len=cite({}, note=f"{NOT_STATED}: the study trains no text model"),
    batches=cite(
        {"vgg16": {"fp32": (32, 64, 128), "amp": (32, 64, 128, 256)}},
        "单位:Images/s,使用精度FP32",
        "32 252.68",
        "128 266.24",
        "256 439.47",
        note="the FP32 table's rows are batch 32, 64, 128; the AMP table's 32, 64, 128, 256",
    ),
    data=cite(
        {"vgg16": ("real",)},
        "我们提供VGG16在ImageNet数据集上的性能基准",
        "我们默认打开了DALI进行数据IO",
        note="ImageNet through DALI; our runner reads it through paddle.io.DataLoader",
    ),
    strategies=cite(
        {"paddle": {"vgg16": ("collective",)}},
        "dist_strategy = fleet.DistributedStrategy()",
        "dist_strategy.nccl_comm_num = 1",
    ),
    hardware="X-Man",
    published_strategies={"fleet collective (nccl)": "collective", "fleet auto-parallel": None},
    not_reproduced=(
        cite(
            {"strategy": "fleet auto-parallel"},
            "dist_strategy.auto = True",
            note="Fleet's auto-parallel mode (its third table, AMP, 16 cells): the Paddle plug-in offers "
            "`collective` only, so no cell reproduces it",
        ),
    ),
)

CAICT_CNNS = ("resnet50", "vgg16")

CAICT2020 = SeedStudy(
    seed="004_53c107c783af76da.txt",
    grid="config/grids/caict2020.yaml",
    warmup_steps=cite(
        20, "每次训练任务共计120个mini-batch", "将每次训练任务的前20个mini-batch作为预热训练,不计入测试结果"
    ),
    measured_steps=cite(100, "选取后100个mini-batch的训练结果计算吞吐率和加速比指标"),
    repeats=cite(3, "并测试3次取平均值"),
    statistic=cite("mean", "并测试3次取平均值"),
    frameworks=cite(
        ("tensorflow", "pytorch", "mxnet", "oneflow"),
        "分别是TensorFlow、PyTorch、MXNet等框架的开源版本,以及OneFlow在开源前的内部版本",
    ),
    models=cite(("resnet50", "vgg16", "bert_base"), "ResNet-50 CV ImageNet", "VGG-16 CV ImageNet", "BERT-Base NLP"),
    precision=cite(("fp32",), note=FP32_UNSTATED),
    scales=cite(
        ("1x1", "1x4", "2x4", "4x4"),
        "1机1卡(1n1c)、1机4卡(1n4c)、2机8卡(2n8c)、4机16卡(4n16c)",
        "共4个节点,每个节点4张GPU",
    ),
    image_size=cite({"resnet50": 224, "vgg16": 224}, note=IMAGE_SIZE_UNSTATED),
    seq_len=cite({"bert_base": 128}, "Max sequence length: 128"),
    batches=cite(
        {
            "resnet50": {"fp32": (1, 64, "max")},
            "vgg16": {"fp32": (1, 64, "max")},
            "bert_base": {"fp32": (1, 128, "max")},
        },
        "分别是最小batch size(取值为1),相同batch size(ResNet-50/VGG-16取值为64,BERT-base取值为128)",
        "最大batch size(当前测试平台所能支持的最大并行规模状态下,各框架能够处理batch size取值的上限)",
        note="max: the largest batch that fits, found per framework and scale (the batch search)",
    ),
    data=cite(
        {"resnet50": ("real", "synthetic"), "vgg16": ("real", "synthetic"), "bert_base": ("real",)},
        "对于ResNet-50和VGG-16来说,需要设置真实数据",
        "对于BERT-Base来说,仅需要考虑真实数据",
    ),
    strategies=cite(
        {
            "tensorflow": dict.fromkeys(("resnet50", "vgg16", "bert_base"), ("multi_worker_mirrored",)),
            "pytorch": dict.fromkeys(("resnet50", "vgg16", "bert_base"), ("ddp",)),
            "mxnet": dict.fromkeys(("resnet50", "vgg16", "bert_base"), ("dist_sync",)),
            "oneflow": dict.fromkeys(("resnet50", "vgg16", "bert_base"), ("ddp",)),
        },
        note=f"{NOT_STATED}: the report names each framework's reference implementation (表3), not how it "
        "distributes; the grid uses each framework's own synchronous data parallelism across nodes",
    ),
    not_run=(
        cite({"framework": "pytorch", "data": "synthetic"}, "PyTorch不支持合成数据,因此不参与合成数据组别的测试"),
        cite(
            {"framework": "pytorch", "model": "bert_base"},
            "PyTorch关于BERT-Base的参考实现在实际测试环境中未能运行,因此不参与本次测试",
        ),
    ),
)

STUDIES = (TF_CNN_BENCHMARKS, PADDLE_VGG16, CAICT2020)
