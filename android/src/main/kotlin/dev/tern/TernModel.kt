package dev.tern

import java.util.concurrent.atomic.AtomicLong

/**
 * A loaded `.tern` model (`tern_model`). Share it between sessions and threads; [close] it when
 * done (sessions made from it stay usable: they keep the weights alive).
 *
 * @param device 0 = auto, 1 = CPU, 2 = GPU (`TERN_DEVICE_*`).
 * @throws TernException IO for a missing file, CORRUPT_FILE, UNSUPPORTED, ...
 */
class TernModel @JvmOverloads constructor(
    path: String,
    device: Int = 0,
    useThreads: Boolean = true
) : AutoCloseable {
    private val handle = AtomicLong(0)

    init {
        Tern.ensureLoaded()
        handle.set(Native.modelLoad(path, device, useThreads))
    }

    internal fun handle(): Long {
        val h = handle.get()
        check(h != 0L) { "TernModel is closed" }
        return h
    }

    /** Render [messages] with the model's chat template into a prompt for [TernSession.generate]. */
    @JvmOverloads
    fun applyChatTemplate(messages: List<ChatMessage>, addGenerationPrompt: Boolean = true): String =
        Native.chatApply(
            handle(),
            messages.map { it.role }.toTypedArray(),
            messages.map { it.content }.toTypedArray(),
            addGenerationPrompt
        )

    /** Free the model handle. Safe to call more than once. */
    override fun close() {
        val h = handle.getAndSet(0)
        if (h != 0L) Native.modelFree(h)
    }
}
