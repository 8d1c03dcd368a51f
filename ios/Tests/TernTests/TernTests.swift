// Mirrors tests/c/test_tern.c. Needs TERN_TEST_MODEL=/path/to/SmolLM2-135M-Instruct.tern
// (`tern fetch-default` prints it). Linux: scripts/swift-test.sh (Debian 13's swiftlang in a
// chroot, against libtern.so); a Mac: `swift test` in ios/ after build-xcframework.sh.
import XCTest
@testable import Tern
import TernFFI

final class TernTests: XCTestCase {
    var modelPath: String!

    override func setUpWithError() throws {
        guard let p = ProcessInfo.processInfo.environment["TERN_TEST_MODEL"] else {
            throw XCTSkip("set TERN_TEST_MODEL to a .tern file")
        }
        modelPath = p
    }

    func collect(_ s: Session, _ prompt: String, _ n: Int32) async throws -> String {
        var text = ""
        for try await piece in s.generate(prompt, maxTokens: n) { text += piece }
        return text
    }

    func testVersionsAndErrors() throws {
        XCTAssertEqual(Tern.abiVersion, tern_abi_version())
        XCTAssertFalse(Tern.version.isEmpty)
        XCTAssertThrowsError(try Model(path: "/nonexistent/model.tern")) { e in
            XCTAssertEqual((e as? TernError)?.status, TernError.io)
        }
    }

    func testGreedyAndScore() async throws {
        let s = try Session(model: try Model(path: modelPath), contextSize: 256)
        let a = try await collect(s, "The capital of France is", 32)
        let b = try await collect(s, "The capital of France is", 32)
        XCTAssertTrue(a.contains("Paris"))
        XCTAssertEqual(a, b)
        let sc = try s.score("The cat sat on the mat. It was a sunny day.")
        XCTAssertGreaterThan(sc.tokens, 5)
        XCTAssertLessThan(sc.totalLogprob, 0)
    }

    func testStopByBreaking() async throws {
        let s = try Session(model: try Model(path: modelPath), contextSize: 256)
        var n = 0
        for try await _ in s.generate("Once upon a time", maxTokens: 64) {
            n += 1
            if n == 3 { break }
        }
        XCTAssertEqual(n, 3)
        let after = try await collect(s, "Hello", 3)  // the session is usable again
        XCTAssertFalse(after.isEmpty)
    }

    func testTaskCancellation() async throws {
        let s = try Session(model: try Model(path: modelPath), contextSize: 512)
        let task = Task { () -> Int in
            var n = 0
            for try await _ in s.generate("Once upon a time, in a land far away,", maxTokens: -1) { n += 1 }
            return n
        }
        try await Task.sleep(nanoseconds: 500_000_000)
        let t0 = Date()
        task.cancel()
        _ = try? await task.value
        XCTAssertLessThan(Date().timeIntervalSince(t0), 2.0)
    }

    func testTwoSessionsOnTwoThreads() async throws {
        let m = try Model(path: modelPath)
        let s1 = try Session(model: m, contextSize: 128)
        let s2 = try Session(model: m, contextSize: 128)
        async let a = collect(s1, "The three primary colors are", 16)
        async let b = collect(s2, "The three primary colors are", 16)
        let (ta, tb) = try await (a, b)
        XCTAssertEqual(ta, tb)
    }

    func testChat() async throws {
        let m = try Model(path: modelPath)
        let prompt = try m.applyChatTemplate([(role: "user", content: "What is the capital of France?")])
        XCTAssertTrue(prompt.contains("<|im_start|>assistant"))
        let s = try Session(model: m, contextSize: 256)
        let answer = try await collect(s, prompt, 24)
        XCTAssertTrue(answer.contains("Paris"))
    }

    func testOptionsAndErrors() throws {
        let m = try Model(path: modelPath, device: .cpu, maxMemory: 3 << 30)
        for f in [KvFormat.f16, .q8, .q4] {
            let s = try Session(model: m, options: SessionOptions(contextSize: 64, kvFormat: f,
                                                                   kiviGroup: 16, kiviWindow: 32))
            let r = try s.report()
            XCTAssertEqual(r.kvFormat, f)
            XCTAssertEqual(r.maxMemory, 3 << 30)
            XCTAssertEqual(r.device, .cpu)
        }
        XCTAssertThrowsError(try Session(model: m, options: SessionOptions(kvFormat: .q4, kiviWindow: 40))) { e in
            XCTAssertEqual((e as? TernError)?.status, TernError.invalidArgument)
        }
    }

    func testInfoTokensTemplate() throws {
        let m = try Model(path: modelPath)
        let i = try m.info()
        XCTAssertEqual(i.vocabularySize, 49152)
        XCTAssertEqual(i.architecture, "llama")
        XCTAssertNotNil(i.chatTemplate)
        XCTAssertGreaterThanOrEqual(i.trainingContext, 2048)
        let text = "Hello, world! Tern runs on phones."
        let ids = try m.tokenize(text, addSpecial: false, parseSpecial: false)
        XCTAssertGreaterThan(ids.count, 4)
        XCTAssertEqual(try m.detokenize(ids), text)
        let own = try m.applyChatTemplate([(role: "user", content: "Hi")],
                                          template: "{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}",
                                          addGenerationPrompt: false)
        XCTAssertEqual(own, "[user] Hi")
        XCTAssertThrowsError(try m.applyChatTemplate([(role: "user", content: "Hi")], template: "{% for %}")) { e in
            XCTAssertEqual((e as? TernError)?.status, TernError.template)
        }
    }

    func testStopStringsAndSaveRestore() async throws {
        let m = try Model(path: modelPath)
        let s = try Session(model: m, contextSize: 256)
        let prompt = try m.applyChatTemplate([(role: "user", content: "What is the capital of France?")])
        let full = try await collect(s, prompt, 24)
        var cut = ""
        for try await p in s.generate(prompt, maxTokens: 24, stop: [" "]) { cut += p }
        if let sp = full.firstIndex(of: " ") {
            XCTAssertEqual(cut, String(full[..<sp]))
        }
        let state = try s.save()
        let next = prompt + full + "<|im_end|>\n<|im_start|>user\nAnd of Spain?<|im_end|>\n<|im_start|>assistant\n"
        let want = try await collect(s, next, 16)
        let r = try Session(model: m, contextSize: 256)
        try r.restore(state)
        let got = try await collect(r, next, 16)
        XCTAssertEqual(got, want)
        let other = try Session(model: m, contextSize: 128)
        XCTAssertThrowsError(try other.restore(state)) { e in
            XCTAssertEqual((e as? TernError)?.status, TernError.stateMismatch)
        }
        XCTAssertThrowsError(try other.restore([1, 2, 3])) { e in
            XCTAssertEqual((e as? TernError)?.status, TernError.corruptFile)
        }
    }
}
