package dev.tern

import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit

/**
 * One conversation on a [TernModel] (`tern_session`) made as [options] say (context, KV-cache
 * format, KIVI, MiniCache, numerics; checked by the engine: INVALID_ARGUMENT names a bad value).
 * Calls on one session run one at a time (they wait for each other); [cancel] works from any
 * thread. [close] cancels a running generation, waits for it, and frees the session.
 */
class TernSession(model: TernModel, options: SessionOptions) : AutoCloseable {
    /** A session with a KV cache for [nCtx] tokens (0 = the model's training context, capped). */
    @JvmOverloads constructor(model: TernModel, nCtx: Int = 0) : this(model, SessionOptions(nCtx = nCtx))

    /** Held by every native call except cancel. */
    private val callLock = Any()
    /** Guards [handle] against a concurrent free while cancel uses it. */
    private val handleLock = Any()
    @Volatile private var handle: Long = 0
    @Volatile private var closing = false

    init {
        Tern.ensureLoaded()
        val mc = options.miniCache
        handle = Native.sessionNew(
            model.handle(), options.nCtx, options.kvFormat,
            when (mc) {
                is MiniCache.Off -> MiniCache.OFF
                is MiniCache.On -> MiniCache.ON
                is MiniCache.Custom -> MiniCache.CUSTOM
            },
            (mc as? MiniCache.Custom)?.startLayer ?: 0,
            (mc as? MiniCache.Custom)?.t ?: 0.5f,
            (mc as? MiniCache.Custom)?.gamma ?: 1f,
            options.kiviGroup, options.kiviWindow, options.llamaCppNumerics
        )
    }

    /** What the session really uses (`tern_session_get_report`): device, context, KV cache. */
    fun report(): SessionReport = synchronized(callLock) {
        val r = Native.sessionReport(live())
        val mc = when (r[5].toInt()) {
            MiniCache.OFF -> MiniCache.Off
            else -> MiniCache.Custom(
                r[6].toInt(),
                java.lang.Float.intBitsToFloat(r[7].toInt()),
                java.lang.Float.intBitsToFloat(r[8].toInt())
            )
        }
        SessionReport(
            device = r[0].toInt(), nCtx = r[1].toInt(), kvFormat = r[2].toInt(),
            kiviGroup = r[3].toInt(), kiviWindow = r[4].toInt(), miniCache = mc,
            llamaCppNumerics = r[9] != 0L, maxMemory = r[10], kvBytes = r[11]
        )
    }

    private fun live(): Long {
        val h = handle
        check(h != 0L) { "TernSession is closed" }
        return h
    }

    /**
     * Generate after [prompt] (the whole context, e.g. from [TernModel.applyChatTemplate]),
     * blocking, calling [onPiece] with UTF-8-complete pieces of text on this thread; [onPiece]
     * returns false to stop. [maxTokens] < 0: until end of generation or a full context.
     *
     * @throws TernException CANCELLED after [cancel], CONTEXT_FULL, INVALID_ARGUMENT, ...
     */
    @JvmOverloads
    fun generateBlocking(
        prompt: String,
        sampling: Sampling = Sampling(),
        maxTokens: Int = 256,
        stop: Stop = Stop(),
        onPiece: (String) -> Boolean
    ) {
        synchronized(callLock) {
            val cb = object : PieceCallback {
                override fun onPiece(piece: String): Boolean = onPiece(piece) && !closing
            }
            Native.generate(
                live(), prompt,
                sampling.temperature, sampling.topK, sampling.topP, sampling.minP,
                sampling.repeatPenalty, sampling.repeatLastN, sampling.seed,
                maxTokens, stop.strings.toTypedArray(), stop.tokens.toIntArray(), cb
            )
        }
    }

    /**
     * Start generating on a background thread; read the pieces from the returned [PieceStream]
     * and close it when done (closing it early cancels the generation). The coroutine `Flow`
     * version, `TernSession.generate`, is built on this.
     */
    @JvmOverloads
    fun stream(
        prompt: String,
        sampling: Sampling = Sampling(),
        maxTokens: Int = 256,
        stop: Stop = Stop()
    ): PieceStream = PieceStream(this, prompt, sampling, maxTokens, stop)

    /** The session's tokens and KV cache as bytes (`tern_session_save`). */
    fun save(): ByteArray = synchronized(callLock) { Native.sessionSave(live()) }

    /**
     * Make this session hold a state from [save] (`tern_session_restore`).
     * @throws TernException STATE_MISMATCH (another model, KV format, context or device),
     *   CORRUPT_FILE, UNSUPPORTED (another state version).
     */
    fun restore(state: ByteArray) = synchronized(callLock) { Native.sessionRestore(live(), state) }

    /** Total natural-log probability of [text]'s tokens after the first (see `tern_score`). */
    fun score(text: String): Score = synchronized(callLock) {
        val r = Native.score(live(), text)
        Score(r[0], r[1].toLong())
    }

    /** Forget the KV cache. */
    fun reset() = synchronized(callLock) { Native.sessionReset(live()) }

    /** Make a running generation or score end with [TernException] CANCELLED. Any thread. */
    fun cancel() {
        synchronized(handleLock) {
            val h = handle
            if (h != 0L) Native.cancel(h)
        }
    }

    /** Cancel what runs, wait for it, free the session. Safe to call more than once. */
    override fun close() {
        closing = true
        cancel()
        synchronized(callLock) {
            val h = synchronized(handleLock) {
                val old = handle
                handle = 0
                old
            }
            if (h != 0L) Native.sessionFree(h)
        }
    }
}

/**
 * The pieces of one generation running on a background thread. [poll] them until [isFinished];
 * [close] it (always) to stop the generation early and wait for the thread.
 */
class PieceStream internal constructor(
    private val session: TernSession,
    prompt: String,
    sampling: Sampling,
    maxTokens: Int,
    stop: Stop = Stop()
) : AutoCloseable {
    private object End
    private class Failure(val error: Throwable)

    private val queue = LinkedBlockingQueue<Any>()
    @Volatile private var stopped = false
    @Volatile private var finished = false
    private val worker = Thread({
        try {
            session.generateBlocking(prompt, sampling, maxTokens, stop) { piece ->
                queue.put(piece)
                !stopped
            }
            queue.put(End)
        } catch (e: Throwable) {
            queue.put(Failure(e))
        }
    }, "tern-generate")

    init {
        worker.isDaemon = true
        worker.start()
    }

    /** True once the generation has ended and every piece has been read. */
    val isFinished: Boolean get() = finished

    /**
     * The next piece, waiting at most [timeoutMillis]; null if none came in time or the
     * generation has ended ([isFinished]). Rethrows the generation's error (a [TernException]).
     */
    fun poll(timeoutMillis: Long): String? {
        if (finished) return null
        val item = queue.poll(timeoutMillis, TimeUnit.MILLISECONDS) ?: return null
        return when (item) {
            is String -> item
            is Failure -> {
                finished = true
                throw item.error
            }
            else -> {
                finished = true
                null
            }
        }
    }

    /** The next piece, blocking; null at the end. */
    fun next(): String? {
        while (true) {
            val p = poll(1000)
            if (p != null || finished) return p
        }
    }

    /** Stop the generation if it still runs (cancelling it) and wait for its thread. */
    override fun close() {
        if (worker.isAlive) {
            stopped = true
            session.cancel()
        }
        worker.join()
        finished = true
    }
}
