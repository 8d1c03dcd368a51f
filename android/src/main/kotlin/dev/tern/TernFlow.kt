package dev.tern

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.flow
import kotlinx.coroutines.flow.flowOn
import kotlinx.coroutines.yield

/**
 * Generation as a cold [Flow] of UTF-8-complete text pieces: each collection runs one generation
 * (on [Dispatchers.IO]). Cancelling the collecting coroutine cancels the native generation
 * (`tern_cancel`) within a token; a failure is thrown as [TernException].
 *
 * Needs kotlinx-coroutines ≥ 1.3 (Flow). Everything it uses from the session ([TernSession.stream],
 * [PieceStream]) is also usable without coroutines.
 */
fun TernSession.generate(
    prompt: String,
    sampling: Sampling = Sampling(),
    maxTokens: Int = 256,
    stop: Stop = Stop()
): Flow<String> = flow {
    val pieces = stream(prompt, sampling, maxTokens, stop)
    try {
        while (true) {
            val piece = pieces.poll(20)
            if (piece != null) {
                emit(piece)
            } else if (pieces.isFinished) {
                break
            } else {
                yield() // a cancellation point while the next token is computed
            }
        }
    } finally {
        pieces.close()
    }
}.flowOn(Dispatchers.IO)
