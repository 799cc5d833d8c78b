import {getLlama, LlamaLogLevel} from "node-llama-cpp";
const llama = await getLlama({gpu: false, build: "never", skipDownload: true, maxThreads: 0, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: process.argv[2]});
const T = +process.argv[3];
const ctx = await model.createContext({contextSize: 512, batchSize: 64, threads: T});
const seq = ctx.getSequence();
const it = seq.evaluate([5, 6, 7, 8], {temperature: 0, yieldEogToken: true});
await it.next();
const d = [];
for (let i = 0; i < 30; i++) { const t0 = performance.now(); await it.next(); d.push((performance.now() - t0).toFixed(2)); }
console.log(`T=${T}`, d.join(" "));
await it.return();
