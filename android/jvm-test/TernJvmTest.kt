// Desktop-JVM test of the Kotlin wrapper against the Linux libtern.so (built with the `jni`
// feature), run by tests/c/run.sh:
//   java -Djava.library.path=target/release -cp ... dev.tern.TernJvmTestKt MODEL PROMPT N EXPECTED.txt
// Compiles with Debian's Kotlin 1.3.31 and needs no coroutines (the Flow wrapper, TernFlow.kt,
// needs kotlinx-coroutines >= 1.3, which Debian does not package).
package dev.tern

import java.io.File
import java.util.concurrent.atomic.AtomicInteger

private var passed = 0
private var failed = 0

private fun check(cond: Boolean, what: String) {
    if (cond) passed++ else {
        failed++
        System.err.println("FAIL: $what")
    }
}

/** `use` for AutoCloseable (Kotlin 1.3's stdlib has it only for Closeable without the jdk7 jar). */
private inline fun <T : AutoCloseable, R> T.using(block: (T) -> R): R =
    try {
        block(this)
    } finally {
        close()
    }

private fun status(block: () -> Unit): Int =
    try {
        block()
        0
    } catch (e: TernException) {
        e.status
    }

fun main(args: Array<String>) {
    require(args.size == 4) { "usage: TernJvmTest MODEL PROMPT N_TOKENS EXPECTED.txt" }
    val (modelPath, prompt, nText, expectedPath) = args
    val n = nText.toInt()
    // The expected text is `tern run`'s stdout: the generation plus a newline.
    val expected = File(expectedPath).readText().removeSuffix("\n")

    Tern.ensureLoaded() // checks the ABI version
    println("tern ${Tern.version()} (ABI ${Tern.ABI_VERSION}) on ${System.getProperty("java.vm.name")} ${System.getProperty("java.version")}")

    // Errors arrive as TernException with the C status.
    check(status { TernModel("/nonexistent/model.tern").close() } == TernException.IO, "missing file -> IO")
    // The GPU device loads where a Vulkan/Metal adapter exists (lavapipe counts), else UNSUPPORTED.
    val gpu = status { TernModel(modelPath, 2).close() }
    check(gpu == 0 || gpu == TernException.UNSUPPORTED, "GPU -> OK or UNSUPPORTED")
    check(Tern.liveHandles() == 0L, "no handle after failed loads")

    val model = TernModel(modelPath)
    val session = TernSession(model, 256)
    try {
        // Greedy, blocking: equals `tern run`.
        val sb = StringBuilder()
        session.generateBlocking(prompt, Sampling(), n) { piece -> sb.append(piece); true }
        println("greedy: $sb")
        check(sb.toString() == expected, "greedy text equals tern run's: got [$sb], want [$expected]")

        // The same through a PieceStream (a background thread, as the Flow uses it).
        val streamed = StringBuilder()
        val stream = session.stream(prompt, Sampling(), n)
        try {
            while (true) {
                val p = stream.poll(20)
                if (p != null) streamed.append(p) else if (stream.isFinished) break
            }
        } finally {
            stream.close()
        }
        check(streamed.toString() == expected, "streamed text equals tern run's")

        // The callback stops generation.
        val count = AtomicInteger(0)
        session.generateBlocking("Once upon a time", Sampling(), 64) { count.incrementAndGet() < 3 }
        check(count.get() == 3, "callback stop after 3 pieces (got ${count.get()})")

        // Closing a stream early cancels the generation promptly.
        val early = session.stream("Once upon a time, in a land far away,", Sampling(), -1)
        val first = early.next()
        val t0 = System.nanoTime()
        early.close()
        val ms = (System.nanoTime() - t0) / 1e6
        println("stream closed early after \"$first\": generation stopped in ${"%.0f".format(ms)} ms")
        check(first != null && ms < 2000, "early close stops the generation")

        // cancel() from another thread ends a blocking generation with CANCELLED.
        val started = java.util.concurrent.CountDownLatch(1)
        val canceller = Thread {
            started.await()
            session.cancel()
        }
        canceller.start()
        val st = status {
            session.generateBlocking("Once upon a time, in a land far away,", Sampling(), -1) {
                started.countDown()
                true
            }
        }
        canceller.join()
        check(st == TernException.CANCELLED, "cancel -> CANCELLED (got $st)")

        // Bad arguments.
        check(status { session.generateBlocking("", Sampling(), 4) { true } } == TernException.INVALID_ARGUMENT, "empty prompt")
        check(status { session.generateBlocking("Hi", Sampling(topP = 0f), 4) { true } } == TernException.INVALID_ARGUMENT, "top_p = 0")

        // Seeded sampling is reproducible.
        val s1 = StringBuilder()
        val s2 = StringBuilder()
        val sampling = Sampling(temperature = 0.8f, topK = 40, topP = 0.95f, seed = 7)
        session.generateBlocking("Once upon a time", sampling, 12) { s1.append(it); true }
        session.reset()
        session.generateBlocking("Once upon a time", sampling, 12) { s2.append(it); true }
        check(s1.toString() == s2.toString() && s1.isNotEmpty(), "seeded sampling reproducible")

        // Scoring.
        val sc = session.score("The cat sat on the mat. It was a sunny day.")
        println("score: ${sc.tokens} tokens, total ${sc.totalLogprob}, perplexity ${sc.perplexity}")
        check(sc.tokens > 5 && sc.totalLogprob < 0, "score")

        // Chat template + generation.
        val chat = model.applyChatTemplate(listOf(ChatMessage("user", "What is the capital of France?")))
        check(chat.contains("<|im_start|>assistant"), "chat template")
        val answer = StringBuilder()
        session.generateBlocking(chat, Sampling(), 24) { answer.append(it); true }
        println("chat: $answer")
        check(answer.contains("Paris"), "chat answer mentions Paris")

        // Every option reaches the engine and reads back from the session report.
        val r0 = session.report()
        check(r0.device == Device.CPU && r0.nCtx == 256 && r0.kvFormat == KvFormat.Q8 &&
            r0.miniCache == MiniCache.Off && r0.maxMemory == 0L && r0.kvBytes > 0, "default report: $r0")
        val formats = listOf(KvFormat.F32, KvFormat.F16, KvFormat.Q8, KvFormat.Q4, KvFormat.Q3,
            KvFormat.Q2, KvFormat.A4, KvFormat.A3, KvFormat.Q4R, KvFormat.Q3R, KvFormat.Q2R)
        for (f in formats) {
            TernSession(model, SessionOptions(nCtx = 64, kvFormat = f, kiviGroup = 16, kiviWindow = 32)).using {
                val r = it.report()
                check(r.kvFormat == f && r.nCtx == 64 && r.kiviGroup == 16 && r.kiviWindow == 32,
                    "kv format $f reads back: $r")
            }
        }
        TernSession(model, SessionOptions(nCtx = 64, miniCache = MiniCache.Custom(26, 0.5f, 0.25f),
            llamaCppNumerics = true)).using {
            val r = it.report()
            check(r.miniCache == MiniCache.Custom(26, 0.5f, 0.25f) && r.llamaCppNumerics,
                "MiniCache custom + llama.cpp numerics read back: $r")
        }
        TernSession(model, SessionOptions(nCtx = 64, miniCache = MiniCache.On)).using {
            check(it.report().miniCache is MiniCache.Custom, "MiniCache on reads back its values")
        }
        check(status { TernSession(model, SessionOptions(kvFormat = 11)).close() } == TernException.INVALID_ARGUMENT,
            "kv format 11 -> INVALID_ARGUMENT")
        check(status { TernSession(model, SessionOptions(kvFormat = KvFormat.Q4, kiviWindow = 40)).close() } ==
            TernException.INVALID_ARGUMENT, "KIVI window 40 -> INVALID_ARGUMENT")
        TernModel(modelPath, Device.CPU, false, 3L shl 30).using { m ->
            TernSession(m, 32).using {
                val r = it.report()
                check(r.device == Device.CPU && r.maxMemory == 3L shl 30, "CPU device + budget read back: $r")
            }
        }
        // Issue 32: metadata, tokens, the app's own template, stop strings and tokens,
        // save/restore, the thread count.
        val info = model.info()
        println("info: $info".take(300))
        check(info.nVocab == 49152 && info.nCtxTrain >= 2048 && info.architecture == "llama" &&
            info.hasChatTemplate && info.chatTemplate != null && info.name.isNotEmpty() &&
            info.cpuThreads >= 1 && info.weightBytes > 0, "model info")
        val text = "Hello, world! Tern runs on phones."
        val ids = model.tokenize(text, addSpecial = false, parseSpecial = false)
        check(ids.size > 4 && model.detokenize(ids) == text, "tokenize/detokenize round trip")
        check(status { model.detokenize(intArrayOf(1 shl 30)) } == TernException.INVALID_ARGUMENT,
            "detokenize: id outside the vocabulary")
        val own = model.applyChatTemplate("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}",
            listOf(ChatMessage("user", "Hi")), false)
        check(own == "[user] Hi\n", "custom chat template: [$own]")
        check(status { model.applyChatTemplate("{% for %}", listOf(ChatMessage("user", "Hi"))) } ==
            TernException.TEMPLATE, "bad template -> TEMPLATE")
        session.reset()
        val full = StringBuilder()
        session.generateBlocking(chat, Sampling(), 24) { full.append(it); true }
        val cut = StringBuilder()
        session.generateBlocking(chat, Sampling(), 24, Stop(strings = listOf(" "))) { cut.append(it); true }
        val firstSpace = full.indexOf(" ")
        check(firstSpace < 0 || cut.toString() == full.substring(0, firstSpace),
            "stop string: [$cut] from [$full]")
        val answerIds = model.tokenize(full.toString(), false, false)
        if (answerIds.size >= 2) {
            val one = StringBuilder()
            session.generateBlocking(chat, Sampling(), 24, Stop(tokens = listOf(answerIds[1]))) { one.append(it); true }
            check(one.toString() == model.detokenize(intArrayOf(answerIds[0])), "stop token: [$one]")
        }
        val state = session.save()
        val next = chat + full + "<|im_end|>\n<|im_start|>user\nAnd of Spain?<|im_end|>\n<|im_start|>assistant\n"
        val want = StringBuilder()
        session.generateBlocking(next, Sampling(), 16) { want.append(it); true }
        TernSession(model, 256).using { restored ->
            restored.restore(state)
            val got = StringBuilder()
            restored.generateBlocking(next, Sampling(), 16) { got.append(it); true }
            check(got.toString() == want.toString(), "restored session continues the same: [$got] vs [$want]")
        }
        TernSession(model, 128).using {
            check(status { it.restore(state) } == TernException.STATE_MISMATCH, "restore into another context -> STATE_MISMATCH")
        }
        TernModel(modelPath, Device.CPU, true, 0, info.cpuThreads).using { m ->
            check(m.info().cpuThreads == info.cpuThreads, "thread count read back")
        }
        check(status { TernModel(modelPath, Device.CPU, true, 0, info.cpuThreads + 3).close() } ==
            TernException.INVALID_ARGUMENT, "another thread count once the pool exists -> INVALID_ARGUMENT")
        TernModel(modelPath, Device.AUTO).using { m ->
            TernSession(m, 32).using {
                val d = it.report().device
                check(d == Device.CPU || d == Device.GPU, "auto resolves to a device ($d)")
            }
        }
    } finally {
        session.close()
        model.close()
    }
    session.close() // twice is fine
    model.close()
    var closedUse = false
    try {
        session.score("x")
    } catch (e: IllegalStateException) {
        closedUse = true
    }
    check(closedUse, "use after close -> IllegalStateException")
    check(Tern.liveHandles() == 0L, "every handle freed (live: ${Tern.liveHandles()})")

    println("$passed passed, $failed failed")
    System.exit(if (failed == 0) 0 else 1)
}
