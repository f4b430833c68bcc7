"""The app's texts (app.py and kvqa/ui/), in English and Simplified Chinese, by message id: the page's labels, its
panels, and what its handlers and its API say."""

# id -> (English, Chinese). Placeholders are str.format fields, the same in both languages.
TEXTS: dict[str, tuple[str, str]] = {
    # ---- the app's page: fixed texts (shown through gr.I18n, so no parameters but ui.limits')
    "ui.title": ("kvqa: read a document once, ask it anything", "kvqa：文档只读一次，随便问"),
    "ui.intro": (
        "# kvqa\nThe model reads your document **once** (the prefill) and keeps its key/value cache; each question "
        "then costs only its own turn: its tokens and the document's sentences that best match it, quoted beside it.",
        "# kvqa\n模型只读一次你的文档（预填充），并保留它的键值（KV）缓存；之后每个问题只需计算它自己的一轮："
        "问题本身和附在旁边的、与它最相关的文档句子。"),
    "ui.model": ("Model (switching reads the document again)", "模型（切换后会重读文档）"),
    "ui.upload": ("Upload documents: PDF (scans too), Word, PowerPoint, HTML, EPUB, images, .txt, .md (several are "
                  "read as one document)", "上传文档：PDF（含扫描件）、Word、PowerPoint、HTML、EPUB、图片、.txt、.md"
                  "（多个文件作为一篇文档读取）"),
    "ui.paste": ("…or paste text", "……或粘贴文字"),
    "ui.read_pasted": ("Read pasted text (with the files above)", "读取粘贴的文字（连同上面的文件）"),
    "ui.sample": ("Load the sample", "加载示例"),
    "ui.part": ("Part to read (pages of a PDF, characters of a text)", "要读取的部分（PDF 按页，文本按字符）"),
    "ui.part_placeholder": ("e.g. 14-27", "如 14-27"),
    "ui.read_part": ("Read this part", "读取这部分"),
    "ui.limits_label": ("Limits", "上限"),
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
    "status.ready": ("**ready**. Ask a question below; each answer shows its sources and timings.",
                     "**已就绪**。请在下方提问；每个回答都附有出处和用时。"),
    "status.ready_parts": ("**ready**: ask a question below. Its other parts are being read in the background.",
                           "**已就绪**：请在下方提问。其余部分正在后台读取。"),
    "status.behind": ("**{model}** answers best and is reading the document in the background ({percent:.0f}%, about "
                      "{seconds:.0f} s in all on this machine); **{stand_in}** answers meanwhile. {model} takes over "
                      "when it has read it.",
                      "**{model}** 答得最好，正在后台读取文档（{percent:.0f}%，在本机共约 {seconds:.0f} 秒）；"
                      "在此期间由 **{stand_in}** 回答。{model} 读完后接手。"),
    "status.behind_failed": ("{model} could not read the document ({error}); **{stand_in}** answers.",
                             "{model} 未能读取文档（{error}）；由 **{stand_in}** 回答。"),
    "status.took_over": ("**{model}** has read the document and answers from now on (the answers before came from "
                         "{stand_in}).",
                         "**{model}** 已读完文档，此后由它回答（之前的回答来自 {stand_in}）。"),
    "answer.by_stand_in": ("answered by {model} while {behind} reads the document",
                           "由 {model} 回答（{behind} 正在读取文档）"),
    "answer.by": ("answered by {model}", "由 {model} 回答"),
    "status.details": ("Details: model, tokens, cache, memory", "详情：模型、token、缓存、内存"),
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
    "progress.switching": ("Reading the document with {model}: {reason}", "正在用 {model} 读取文档：{reason}"),
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
    "answer.in_part": ("part {part}", "第 {part} 部分"),
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

    # ---- the app's handlers and API: pasted text, parts, questions, models, the promise line
    "file.skipped": ("Skipped: {problem} The other files were read.", "已跳过：{problem} 其他文件已读取。"),
    "paste.too_long": (
        "The pasted text is {chars:,} characters; the limit is {limit:,}. Paste the part you need.",
        "粘贴的文字有 {chars:,} 个字符，上限是 {limit:,}。请粘贴需要的部分。"),
    "answer.part": ("From {part}.", "出自{part}。"),
    "answer.composed": ("Composed: the passages of parts {parts} that match the question ({tokens:,} tokens), their "
                        "caches joined without reading them again in {seconds:.2f} s. Approximate: close to reading "
                        "those passages together, not equal to it.",
                        "拼接：第 {parts} 部分中与问题相符的段落（{tokens:,} 个词元），"
                        "其缓存在 {seconds:.2f} 秒内直接拼接、未重新读入。"
                        "近似：接近把这些段落一起读入的结果，但不完全相同。"),
    "question.nothing_to_ask_again": (
        "No other part matched the last question: ask a new one.",
        "没有其他部分与上一个问题相符：请提一个新问题。"),
    "question.not_a_part": (
        "{range} is not one of this document's parts ({parts}): give one of them, or none to let the question go to "
        "the part that matches it best.",
        "{range} 不是本文档的某个部分（{parts}）：请给出其中之一，或不指定，让问题交给最匹配它的部分。"),
    "question.no_document_api": ("No document is loaded yet: call /prefill first.",
                                 "还没有加载文档：请先调用 /prefill。"),
    "question.no_answer_api": ("No answer yet: call /prefill, then /ask, first.",
                               "还没有回答：请先调用 /prefill，再调用 /ask。"),
    "part.label": ("Part to read ({unit}, 1-{total:,})", "要读取的部分（{unit}，1-{total:,}）"),
    "part.load_first": ("Load a document first, then choose which part of it to read.",
                        "请先加载文档，再选择要读取的部分。"),
    "model.not_offered": ("{model} is not offered here: choose one of {models}.",
                          "这里不提供 {model}：请从 {models} 中选择。"),
    "promise.not_loaded": ("{model}: loads with the first document.", "{model}：随第一份文档加载。"),
    "promise.line": ("{model} on {device} ({dtype}). {guarantee}", "{model}，运行于 {device}（{dtype}）。{guarantee}"),
    # ---- questions asked while a document or a model loads, Stop, and what waits for an answer to end
    "wait.read": ("{stage}: {percent:.0f}%. Your question will be answered when the document is ready.",
                  "{stage}：{percent:.0f}%。文档准备好后就回答你的问题。"),
    "wait.read_asked": ("The document will be read once the model is free (it is reading another); your question "
                        "will be answered then.", "模型正在读取另一份文档，空闲后就读你的文档，并回答你的问题。"),
    "wait.turn": ("Waiting for the answer before it.", "等待前一个回答写完。"),
    "question.wait_first": ("Questions are still waiting to be answered: ask again once they are, or press Stop.",
                            "还有问题在等待回答：等它们答完再问，或按“停止”。"),
    "stop.withdrawn": ("Stopped: {count} waiting question(s) withdrawn.", "已停止：撤回了 {count} 个等待中的问题。"),
    "stop.nothing": ("Nothing to stop: no answer is being written and no question is waiting.",
                     "没有可停止的：没有正在写的回答，也没有等待中的问题。"),
    "stop.reading": ("Stop ends an answer; the document being read is read to the end (load another one to replace "
                     "it).", "“停止”只结束回答；正在读取的文档会读完（加载另一份文档即可替换它）。"),
    "busy.switch_language": ("An answer is being written: switch the language when it is done, or press Stop first.",
                             "正在写回答：写完后再切换语言，或先按“停止”。"),
    "busy.switch_model": ("An answer is being written: switch the model when it is done, or press Stop first.",
                          "正在写回答：写完后再切换模型，或先按“停止”。"),
    "busy.reading": ("A document is being read: wait for it to be ready, then ask for another part or model.",
                     "正在读取文档：等它准备好后，再选择其他部分或模型。"),
}
