#!/usr/bin/env bash
# bench/llamacpp_greedy.sh: makes tests/cpu/golden_llamacpp.json (SmolLM2)
# and tests/cpu/golden_gemma3_llamacpp.json (Gemma 3 270M), llama.cpp's greedy
# token ids on a few prompts, for tests/cpu/test_greedy_llamacpp.py. Run it by
# hand when a model or the prompts change; CI only reads the JSON.
#
#   bench/llamacpp_greedy.sh [BUILD] [smollm2|gemma3]
#       (BUILD: ignite build dir, default build; the model set, default smollm2)
#
# Gemma 3's prompts are long enough (500 to 640 tokens, then 32 steps) to
# cross the 512-position window of its local layers.
#
# Needs llama.cpp's source (headers) and a CPU build of it (static libs), as
# left in ~/.cache/ignite/ by the llama-cpp-python 0.3.36 sdist; override with
# LLAMA_SRC / LLAMA_BUILD. Prompt ids come from `ignite tokenize`, so both
# engines start from the same ids; the driver binary goes to the cache.
#
# Each prompt runs twice: on the Q4_1 model (llama.cpp then quantizes the
# activations to 8 bits in its matmuls, so its logits drift from ignite's
# f32 ones) and on an f32 twin of it, every tensor dequantized by the gguf
# package (made here, in the cache). The twin is the same function as the
# Q4_1 model in exact arithmetic, and llama.cpp runs it without activation
# quantization: that run is the one ignite must match exactly.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SET=${2:-smollm2}
CACHE=~/.cache/ignite
case $SET in
smollm2) MODEL=${IGNITE_MODEL:-$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf}
         OUT=tests/cpu/golden_llamacpp.json QKEY=q4_1 ;;
gemma3) MODEL=${IGNITE_GEMMA3:-$CACHE/gemma-3-270m-q4_k_m.gguf}
        OUT=tests/cpu/golden_gemma3_llamacpp.json QKEY=quant ;;
*) echo "llamacpp_greedy.sh: unknown model set '$SET' (smollm2, gemma3)" >&2; exit 2 ;;
esac
LLAMA_VERSION=0.3.36
LLAMA_SRC=${LLAMA_SRC:-$CACHE/llama-src/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp}
LLAMA_BUILD=${LLAMA_BUILD:-$CACHE/llama.cpp-build/$LLAMA_VERSION}
DRIVER=$CACHE/llamacpp-greedy/llamacpp_greedy
TWIN=$CACHE/llamacpp-greedy/$(basename "$MODEL" .gguf).deq-f32.gguf
N_GEN=32

# The build was configured with GGML_OPENMP=ON, hence -fopenmp.
mkdir -p "$(dirname "$DRIVER")"
g++ -O2 -std=c++17 -I"$LLAMA_SRC/include" -I"$LLAMA_SRC/ggml/include" \
    bench/llamacpp_greedy.cpp -o "$DRIVER" \
    "$LLAMA_BUILD/src/libllama.a" "$LLAMA_BUILD/ggml/src/libggml.a" \
    "$LLAMA_BUILD/ggml/src/libggml-cpu.a" "$LLAMA_BUILD/ggml/src/libggml-base.a" \
    -fopenmp -lpthread -ldl -lm

if [ ! -f "$TWIN" ]; then
    .venv/bin/python - "$MODEL" "$TWIN" <<'PY'
# Writes an f32 twin of a GGUF: every tensor dequantized by the gguf package,
# all metadata copied (file_type set to ALL_F32).
import sys
import numpy as np
from gguf import GGUFReader, GGUFWriter, GGUFValueType, LlamaFileType
from gguf.quants import dequantize
src, dst = sys.argv[1], sys.argv[2]
r = GGUFReader(src)
w = GGUFWriter(dst, arch=r.fields["general.architecture"].contents())
for name, f in r.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
        continue
    if name == "general.file_type":
        w.add_file_type(LlamaFileType.ALL_F32)
        continue
    sub = f.types[1] if f.types[0] == GGUFValueType.ARRAY else None
    w.add_key_value(name, f.contents(), f.types[0], sub_type=sub)
for t in r.tensors:
    w.add_tensor(t.name, dequantize(t.data, t.tensor_type).astype(np.float32))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
PY
fi

if [ "$SET" = smollm2 ]; then
# name and text; the chat prompt is SmolLM2's ChatML with its default system line.
NAMES=(chat story code fact)
TEXTS=(
$'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n'
'Once upon a time, in a small village at the edge of a forest, there lived'
$'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
'The Eiffel Tower is located in Paris and was completed in the year'
)
else
# Gemma 3 270M (a base model): prose, a report and code, each over 500 tokens,
# written for this file; and a short one.
read -r -d '' LOG <<'TXT' || true
The lighthouse keeper's log for the winter of that year survives in a single water-stained volume. Its entries are short at first: the wind from the north-east, the lamp trimmed at dusk, a ship sighted at noon and lost again in the haze. By December they grow longer. The keeper writes about the supply boat that did not come, about rationing the oil so that the light would burn through the longest nights, and about the gulls that gathered on the gallery rail as if they, too, were waiting for something. He counts the tins in the storeroom twice a week. He notes the barometer falling and rising and falling again. On the twelfth he records that the fog was so thick he could not see the rocks below the tower, and that he rang the bell every two minutes from midnight until the grey light of morning, his arms aching, his breath freezing in his beard. There is a gap of four days after that. When the entries resume, the handwriting is careful and small, as if the writer were afraid of wasting ink. The boat has come at last. It brought flour, coffee, lamp oil, two letters and a newspaper three weeks old. He reads the newspaper from the first page to the last, including the shipping notices and the advertisements for patent medicines, and he copies into the log a short article about a comet that astronomers expect to see in the spring. In January the weather turns clear and bitterly cold. The sea freezes in the sheltered cove for the first time in living memory, and the keeper walks out onto the ice to look back at the tower from below, something he has never been able to do before. He describes the tower as smaller than he had imagined it, a white pencil against a sky so blue it hurt to look at. He measures the thickness of the ice with a hand drill and finds it safe. He writes that he stood there a long time. In February the ice breaks up in a single night with a noise like cannon fire, and the entries return to wind, lamp and ships. The last page is dated the first of March. The keeper notes that the days are lengthening, that he has seen the first curlews returning to the marsh, and that the oil will last. Below the final entry, in a different hand, someone has added a single line: relieved of duty, in good health, the light never failed. Historians who have studied the log disagree about almost everything in it. Some read it as a record of endurance, others as the diary of a man who found, in isolation, a kind of freedom he could not name. The keeper himself left no other writing. What is certain is that the tower still stands, that the lamp was electrified long ago, and that on clear winter evenings visitors walk out along the breakwater to watch the beam sweep across the water, counting the seconds between flashes the way he once counted the tins in his storeroom, one by one, until the night was over. Years later his granddaughter found the volume in a trunk, wrapped in oilcloth and tied with tarred string, and gave it to the county archive, where it
TXT
read -r -d '' REPORT <<'TXT' || true
Quarterly report of the river water monitoring station, spring season. Summary: the station recorded water level, temperature, turbidity and dissolved oxygen every fifteen minutes from the first of March to the thirty-first of May. Over the season the sensors produced 8,832 readings each, of which 97.4 percent passed the automatic quality checks. The remaining readings were flagged because of two power interruptions, one on the ninth of April lasting six hours and one on the twentieth of May lasting forty minutes, and because of a fouled turbidity sensor that was cleaned on the second of May. Water level: the river rose from a winter base of 1.42 metres to a peak of 3.87 metres on the seventeenth of March, after four days of rain combined with snowmelt from the upper valley. It then fell steadily, with two smaller peaks in April, and ended the season at 1.95 metres, about thirty centimetres above the long-term average for late May. Temperature: the water warmed from 4.1 degrees at the start of March to 15.8 degrees at the end of May. The daily range widened in May, when clear nights and sunny afternoons produced swings of up to three degrees. Turbidity: the highest values, above 400 units, followed the March flood and fell below 20 units within eleven days. Later rain events produced short spikes that cleared within two days. Dissolved oxygen: concentrations stayed above 8.5 milligrams per litre throughout, with the usual decline as the water warmed. No reading fell below the threshold that would require a notice to the fisheries office. Maintenance: the solar panel was replaced in March, the data logger firmware was updated in April, and the staff gauge was repainted in May. Recommendations for the summer season: install a second battery so that the station can ride out longer cloudy periods, add a camera to document debris during floods, and schedule monthly cleaning of the turbidity sensor from June to September, when algae growth is fastest. The full data set, with the flagged readings marked, has been sent to the regional office and will be published in the open data portal after review. Appendix A lists the calibration results for each sensor, appendix B the maintenance log, and appendix C the comparison with the neighbouring station twelve kilometres downstream, which shows the same flood peak arriving three hours and twenty minutes later and about
TXT
read -r -d '' CODE <<'TXT' || true
import csv
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timedelta


@dataclass
class Reading:
    """One sensor reading: when it was taken, what it measured, and whether it passed the checks."""

    time: datetime
    sensor: str
    value: float
    flagged: bool = False


@dataclass
class Station:
    name: str
    readings: list = field(default_factory=list)

    def add(self, reading):
        """Adds a reading, flagging it when it is outside the sensor's plausible range."""
        low, high = PLAUSIBLE[reading.sensor]
        if not low <= reading.value <= high:
            reading.flagged = True
        self.readings.append(reading)

    def series(self, sensor, include_flagged=False):
        """The readings of one sensor in time order, without the flagged ones unless asked."""
        out = [r for r in self.readings if r.sensor == sensor]
        if not include_flagged:
            out = [r for r in out if not r.flagged]
        return sorted(out, key=lambda r: r.time)

    def daily_means(self, sensor):
        """The mean of each calendar day's good readings, as a dictionary from date to mean."""
        days = {}
        for r in self.series(sensor):
            days.setdefault(r.time.date(), []).append(r.value)
        return {day: statistics.fmean(values) for day, values in sorted(days.items())}

    def gaps(self, sensor, expected=timedelta(minutes=15)):
        """Periods longer than twice the expected interval with no reading at all."""
        times = [r.time for r in self.series(sensor, include_flagged=True)]
        return [(a, b) for a, b in zip(times, times[1:]) if b - a > 2 * expected]


PLAUSIBLE = {
    "level": (0.0, 10.0),
    "temperature": (-1.0, 35.0),
    "turbidity": (0.0, 4000.0),
    "oxygen": (0.0, 20.0),
}


def load(path, name):
    """Reads a CSV file with the columns time, sensor and value into a station."""
    station = Station(name)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            time = datetime.fromisoformat(row["time"])
            station.add(Reading(time, row["sensor"], float(row["value"])))
    return station


def report(station):
    """Prints the number of readings, the share that passed, and the gaps of each sensor."""
    for sensor in PLAUSIBLE:
        good = station.series(sensor)
        every = station.series(sensor, include_flagged=True)
        share = 100.0 * len(good) / len(every) if every else 0.0
        print(f"{sensor}: {len(every)} readings, {share:.1f} percent good")
        for a, b in station.gaps(sensor):
            print(f"  gap from {a} to {b}")


def compare(upstream, downstream, sensor="level"):
    """The delay, in minutes, between the highest readings of two stations."""
TXT
NAMES=(log report code short)
TEXTS=("$LOG" "$REPORT" "$CODE" 'The capital of France is')
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for i in "${!NAMES[@]}"; do
    ids=$("$BUILD/ignite" tokenize -m "$MODEL" -p "${TEXTS[$i]}" | paste -sd,)
    echo "$ids" > "$TMP/$i.ids"
    "$DRIVER" "$MODEL" "$N_GEN" "$ids" > "$TMP/$i.out"
    "$DRIVER" "$TWIN" "$N_GEN" "$ids" > "$TMP/$i.f32"
done

SHA=$(sha256sum "$MODEL" | cut -d' ' -f1)
python3 - "$TMP" "$OUT" "$SHA" "llama-cpp-python $LLAMA_VERSION (vendored llama.cpp), CPU, f32 KV, no flash attention" "$QKEY" "${NAMES[@]}" <<'PY'
import json, re, sys
tmp, out, sha, version, qkey, names = (sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4],
                                       sys.argv[5], sys.argv[6:])


def run(path):
    """One driver output: ids, top1 - top2 margins, top-2 ids, both logits."""
    rows = [line.split() for line in open(path)]
    return {"ids": [int(r[0]) for r in rows],
            "margins": [round(float(r[1]), 4) for r in rows],
            "top2_ids": [int(r[2]) for r in rows],
            "top_logits": [[round(float(r[3]), 4), round(float(r[4]), 4)] for r in rows]}


prompts = []
for i, name in enumerate(names):
    ids = [int(t) for t in open(f"{tmp}/{i}.ids").read().strip().split(",")]
    prompts.append({"name": name, "prompt_ids": ids, qkey: run(f"{tmp}/{i}.out"),
                    "f32_twin": run(f"{tmp}/{i}.f32")})
doc = {"model_sha256": sha, "llama_cpp": version, "n_gen": len(prompts[0][qkey]["ids"]),
       "generated_by": "bench/llamacpp_greedy.sh",
       "f32_twin": "the model with every tensor dequantized to f32 by gguf.quants", "prompts": prompts}
# One line per flat list, so a regenerated file diffs readably.
text = re.sub(r"\[[^\[\]{}]*\]", lambda m: json.dumps(json.loads(m.group(0))),
              json.dumps(doc, indent=1))
with open(out, "w") as f:
    f.write(text + "\n")
print(f"wrote {out}: {len(prompts)} prompts ({', '.join(str(len(p['prompt_ids'])) for p in prompts)} tokens) x {doc['n_gen']} steps")
PY
