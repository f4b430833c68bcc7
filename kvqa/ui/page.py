"""The page's components, built once by app.py's layout and held frozen: every handler is given the Page and returns
its outputs by component (page.chat, page.status, ...)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr


@dataclass(frozen=True)
class Page:
    """Every component of the browser page that a handler reads or shows (the buttons that only trigger are here too,
    for wiring)."""

    state: gr.State  # the tab's Session (None before its first document)
    lang: gr.Radio  # the language the page speaks: en or zh
    promise_box: gr.Markdown  # under the title: what the answers promise
    model_box: gr.Dropdown | None  # the offered models, when there is more than one
    upload: gr.File
    pasted: gr.Textbox
    read_btn: gr.Button
    sample_btn: gr.Button
    status: gr.Markdown  # the document's panel
    part: gr.Textbox  # which part of the document to read
    part_btn: gr.Button
    evidence_pick: gr.Dropdown
    evidence_page: gr.Image
    evidence_text: gr.HTML
    chat: gr.Chatbot
    question: gr.Textbox
    ask_btn: gr.Button
    stop_btn: gr.Button
    remember_box: gr.Checkbox
    new_btn: gr.Button
    also_btn: gr.Button  # ask again from the other part that matched
    ready_box: gr.Checkbox
    baseline_box: gr.Checkbox
    export_btn: gr.Button
    exported: gr.File
    summary: gr.Markdown  # the latency panel: its summary, table and plot
    table: gr.Dataframe
    plot: gr.Plot
    ahead_timer: gr.Timer  # refreshes the status while parts are read ahead

    @property
    def shown(self) -> list:
        """What a read or an answer changes: the session and every panel that shows it."""
        return [self.state, self.status, self.chat, self.summary, self.table, self.plot, self.evidence_pick,
                self.evidence_page, self.evidence_text, self.ahead_timer, self.also_btn, self.promise_box,
                *([self.model_box] if self.model_box is not None else [])]

    @property
    def viewer(self) -> list:
        """The evidence viewer's components."""
        return [self.evidence_pick, self.evidence_page, self.evidence_text]
