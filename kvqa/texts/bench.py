"""The bench's texts (kvqa.bench), in English and Simplified Chinese, by message id."""

# id -> (English, Chinese). Placeholders are str.format fields, the same in both languages.
TEXTS: dict[str, tuple[str, str]] = {
    # ---- the bench (kvqa.bench)
    "bench.prefix_changed": ("The document's prefix changed during the run (the date changed?): run the bench again.",
                             "运行期间文档的前缀变了（日期变了？）：请重新运行 bench。"),
    "bench.no_config": ("No config file '{name}': give a path to a model config JSON, or one of: {names}.",
                        "没有配置文件“{name}”：请给出模型配置 JSON 的路径，或以下之一：{names}。"),
    "bench.bad_config": (
        "Cannot use {path} as a model config: {error}. Give a config.json with a model_type (for example "
        "kvqa/model/configs/llama-3.2-3b.json).",
        "无法把 {path} 用作模型配置：{error}。请给出带 model_type 的 config.json"
        "（例如 kvqa/model/configs/llama-3.2-3b.json）。"),
    "bench.no_tokenizer": ("Cannot load the tokenizer of '{model}' for the random model: {error}",
                           "无法为随机模型加载“{model}”的分词器：{error}"),
    "bench.context_too_short": (
        "A context of {target:,} tokens is too short: the prompt around the document alone takes {around:,} tokens. "
        "Use --contexts with lengths above that.",
        "{target:,} 个 token 的上下文太短：仅文档前后的提示就占 {around:,} 个 token。请用比它更长的 --contexts。"),
    "bench.no_contexts": ("Give at least one context length, each a positive number of tokens.",
                          "请至少给出一个上下文长度，每个都是正的 token 数。"),
    "bench.no_questions": ("Give at least one question.", "请至少给出一个问题。"),
    "bench.unknown_methods": ("Unknown method(s) {unknown}: use {methods}.",
                              "未知的方法 {unknown}：请使用 {methods}。"),
    "bench.context_too_long": (
        "A context of {context:,} tokens does not fit {model}: it reads at most {limit:,} ({length:,} of context, "
        "{reserve:,} kept for the question and answer). Use shorter --contexts.",
        "{context:,} 个 token 的上下文放不进 {model}：它最多读取 {limit:,} 个（上下文 {length:,}，其中 {reserve:,} "
        "留给问题和回答）。请用更短的 --contexts。"),
    "bench.bad_weights": ("--weights takes forms separated by commas, like fp32,int8: got '{value}'.",
                          "--weights 接受用逗号分隔的权重形式，如 fp32,int8：收到的是“{value}”。"),
    "bench.bad_quote_chars": ("--quote-chars takes character counts (0: whole) separated by commas, like 0,120: "
                              "got '{value}'.",
                              "--quote-chars 接受用逗号分隔的字符数（0 表示整段），如 0,120：收到的是“{value}”。"),
    "bench.bad_contexts": (
        "--contexts takes positive token counts separated by commas, like 512,1024: got '{value}'.",
        "--contexts 接受用逗号分隔的正 token 数，如 512,1024：收到的是“{value}”。"),
    "bench.bad_questions": ("--questions must be between 1 and {most}: got {asked}.",
                            "--questions 必须在 1 到 {most} 之间：收到的是 {asked}。"),
    "bench.no_plot_folder": ("Cannot write the plot to {plot}: folder {folder} does not exist.",
                             "无法把图写到 {plot}：文件夹 {folder} 不存在。"),
    "bench.no_sample": ("The sample document {path} is missing: give one with --doc.",
                        "示例文档 {path} 不存在：请用 --doc 指定一个。"),
}
