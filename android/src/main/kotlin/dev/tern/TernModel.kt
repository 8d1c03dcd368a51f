package dev.tern

import java.util.concurrent.atomic.AtomicLong

/**
 * A loaded `.tern` model (`tern_model`). Share it between sessions and threads; [close] it when
 * done (sessions made from it stay usable: they keep the weights alive).
 *
 * @param device [Device.AUTO] (a hardware GPU when there is one and the model has kernels for it,
 *   else the CPU), [Device.CPU] or [Device.GPU] (`TERN_DEVICE_*`).
 * @param useThreads split matrix products over a thread pool (bit-identical results either way).
 * @param maxMemory memory budget in bytes for the model and its sessions (0 = no cap;
 *   `tern_model_options.max_memory`).
 * @throws TernException IO for a missing file, CORRUPT_FILE, UNSUPPORTED, OUT_OF_MEMORY, ...
 */
class TernModel @JvmOverloads constructor(
    path: String,
    device: Int = Device.AUTO,
    useThreads: Boolean = true,
    maxMemory: Long = 0
) : AutoCloseable {
    private val handle = AtomicLong(0)

    init {
        Tern.ensureLoaded()
        handle.set(Native.modelLoad(path, device, useThreads, maxMemory))
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
