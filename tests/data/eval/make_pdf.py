#!/usr/bin/env python
"""Make lumaro-cp40-manual.pdf, the evaluation set's PDF: a fictional product manual, one section per page.

    .venv/bin/python tests/data/eval/make_pdf.py

ASCII only (fpdf2's core Helvetica font), so pypdf extracts the text exactly. The page each fact is on is given
in questions.jsonl; run this again after editing PAGES, then check the pages there.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from fpdf import FPDF

OUT = Path(__file__).parent / "lumaro-cp40-manual.pdf"
TITLE = "Lumaro CP-40 Countertop Water Purifier: User Manual"

# one list per page: ("h", heading) or ("p", paragraph)
PAGES: list[list[tuple[str, str]]] = [
    [
        ("h", "Welcome"),
        ("p", "Thank you for choosing the Lumaro CP-40 countertop water purifier. The CP-40 filters tap water "
              "through an activated carbon cartridge and then passes it under an ultraviolet lamp, so that you have "
              "clean, cool drinking water without bottles. This manual explains how to install, use, clean and "
              "maintain the purifier. Keep it with the appliance. Lumaro and the CP-40 are fictional: this manual "
              "was written for kvqa's evaluation set."),
        ("h", "Safety instructions"),
        ("p", "Read all instructions before using the purifier. Connect the purifier only to an earthed socket "
              "with the voltage shown on the rating plate. Place it on a flat, stable surface at least 10 cm from "
              "the wall, away from direct sunlight and sources of heat. Do not immerse the base unit in water. "
              "Never look directly at the UV lamp: the lid has a safety switch that turns the lamp off when the lid "
              "is opened. Children under 8 years old must not clean or maintain the purifier. Only use the "
              "purifier with cold tap water from the public drinking water supply; it is not designed to treat "
              "water from wells, rivers or rain tanks."),
        ("h", "In the box"),
        ("p", "The box contains: the base unit, the water tank, one FC-12 filter "
              "cartridge, the drip tray, the power cable, and this manual. If anything is missing or damaged, "
              "contact the shop where you bought the purifier before using it."),
    ],
    [
        ("h", "Installation"),
        ("p", "1. Unpack the purifier and remove all packaging tape, including the tape inside the tank lid. "
              "2. Rinse the water tank and the drip tray with warm water; do not use a dishwasher. "
              "3. Take the FC-12 filter cartridge out of its bag and soak it in cold water for 15 minutes, so that "
              "trapped air can escape. 4. Push the cartridge into the holder inside the tank until it clicks. "
              "5. Place the tank on the base unit and press down firmly: the tank is seated correctly when the "
              "blue ring at the bottom of the tank can no longer be seen. 6. Connect the power cable."),
        ("h", "First use"),
        ("p", "A new cartridge releases fine carbon dust. Before drinking any water, flush the new filter by "
              "filling and emptying the tank three times and throwing the water away. The water may look grey the "
              "first time: this is harmless carbon dust and is normal. After flushing, fill the tank with cold tap "
              "water up to the MAX line and press the power button. The UV lamp runs a start-up cycle of 90 "
              "seconds, during which the power light blinks white. When the light stays white, the water is ready."),
        ("h", "Setting the clock"),
        ("p", "The clock is used by the filter reminder. Hold the power button and the lock button together for "
              "three seconds until the hour digits blink. Press the plus and minus buttons to set the hour, press "
              "the power button to confirm, then set the minutes in the same way."),
    ],
    [
        ("h", "Daily use"),
        ("p", "Place a glass under the spout and press the dispense button. The child lock is on by default: press "
              "the lock button once to release it, and it turns on again after 10 seconds. Refill the tank when the "
              "water level reaches the MIN line. Do not fill the tank with hot water, milk, juice or any liquid "
              "other than cold tap water. Water that has stood in the tank for more than three days should be "
              "poured away and the tank refilled."),
        ("h", "Cleaning"),
        ("p", "Empty and rinse the drip tray every day. Once a week, empty the tank, wipe the inside with a soft "
              "cloth and a little washing-up liquid, and rinse it well. Once a month, descale the spout with a "
              "solution of one part white vinegar to four parts water. Never use bleach, abrasive cleaners or "
              "scouring pads on any part of the purifier."),
        ("h", "Replacing the filter"),
        ("p", "The FC-12 filter cartridge must be replaced every 90 days or after 600 litres, whichever comes "
              "first. When the cartridge is due, the filter indicator light turns amber. Once the cartridge is "
              "past its limit, the light turns red and the purifier will not dispense water until the filter is "
              "replaced. To replace it, lift the tank off the base, pull the old cartridge straight up, and fit "
              "a new one as described under Installation, including soaking and flushing. Then hold the filter "
              "button for five seconds to reset the counter; the indicator light turns green."),
    ],
    [
        ("h", "Troubleshooting"),
        ("p", "The display shows an error code when the purifier detects a fault. Most faults can be cleared by the "
              "user. If a code stays on after the action below, switch the purifier off at the socket, wait one "
              "minute and switch it on again, then contact Lumaro service."),
        ("p", "Error E1: the water tank is empty. Fill the tank up to the MAX line."),
        ("p", "Error E3: the tank is not seated correctly on the base. Lift the tank and put it back, pressing "
              "down firmly until the blue ring is hidden."),
        ("p", "Error E5: the water is too warm (above 35 degrees C). Empty the tank and refill it with cold tap "
              "water."),
        ("p", "Error E7: UV lamp fault. The lamp has failed or is not connected. Do not drink the water. Stop "
              "using the purifier and contact Lumaro service; the lamp can only be replaced by a service "
              "technician."),
        ("p", "Water tastes of plastic: this is normal during the first days. Flush the tank two more times."),
        ("p", "Water flows slowly: the cartridge was not soaked, or air is trapped in it. Take it out, soak it "
              "again as described under Installation, and fit it again."),
        ("p", "Water leaks under the base: the drip tray is full or the tank seal is dirty. Empty the tray and "
              "wipe the seal with a damp cloth."),
    ],
    [
        ("h", "Specifications"),
        ("p", "Model: CP-40. Rated voltage: 220-240 V, 50 Hz. Power consumption: 48 W. Tank capacity: 4.5 litres. "
              "Filtration rate: 0.8 litres per minute. Dimensions: 28 x 22 x 41 cm. Net weight (empty): 5.2 kg. "
              "Filter cartridge: FC-12, activated carbon. UV lamp: 254 nm, rated for "
              "10,000 hours."),
        ("h", "Warranty"),
        ("p", "The CP-40 comes with a warranty of 2 years from the date of purchase, covering faults in materials "
              "and workmanship. If you register the purifier on the Lumaro website within 60 days of purchase, the "
              "warranty is extended to 5 years. Filter cartridges are consumables and are not covered. The "
              "warranty does not cover damage caused by hot water, descaling neglect, or use with water other "
              "than drinking water from the public supply."),
        ("h", "Service and disposal"),
        ("p", "For service, call the Lumaro customer line on 0800 555 0147, Monday to Friday from 08:00 to 18:00, "
              "and have the serial number ready: it is printed on the label under the base. Do not throw the "
              "purifier away with household waste: take it to a collection point for electrical appliances. Used "
              "FC-12 cartridges can be returned to any Lumaro dealer for recycling."),
    ],
]


def build(path: Path = OUT) -> None:
    """Write the manual, one PAGES entry per PDF page, with a page number in the footer."""
    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(auto=False)
    pdf.set_margins(20, 20, 20)
    for number, page in enumerate(PAGES, start=1):
        pdf.add_page()
        pdf.set_font("Helvetica", "B", 9)
        pdf.cell(0, 6, TITLE, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(4)
        for kind, text in page:
            if kind == "h":
                pdf.set_font("Helvetica", "B", 14)
                pdf.ln(2)
                pdf.multi_cell(0, 8, text, new_x="LMARGIN", new_y="NEXT")
            else:
                pdf.set_font("Helvetica", "", 11)
                pdf.multi_cell(0, 6, text, new_x="LMARGIN", new_y="NEXT")
                pdf.ln(2)
        assert pdf.get_y() < pdf.h - 20, f"page {number} overflows"
        pdf.set_y(-15)
        pdf.set_font("Helvetica", "", 9)
        pdf.cell(0, 6, f"Page {number} of {len(PAGES)}", align="C")
    pdf.set_creation_date(datetime(2025, 1, 1, tzinfo=timezone.utc))  # the same bytes on every run
    pdf.output(str(path))


if __name__ == "__main__":
    build()
    print(f"wrote {OUT}")
