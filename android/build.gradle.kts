// tern's Android library: the Kotlin wrapper in src/main/kotlin over libtern.so (ffi crate,
// feature `jni`), which `./gradlew cargoNdk` builds into src/main/jniLibs with cargo-ndk.
plugins {
    id("com.android.library") version "8.5.2"
    id("org.jetbrains.kotlin.android") version "2.0.20"
}

android {
    namespace = "dev.tern"
    compileSdk = 34
    defaultConfig {
        minSdk = 24
        consumerProguardFiles("consumer-rules.pro")
    }
    sourceSets["main"].java.srcDirs("src/main/kotlin")
    sourceSets["main"].jniLibs.srcDirs("src/main/jniLibs")
    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }
    kotlinOptions {
        jvmTarget = "17"
    }
}

dependencies {
    implementation("org.jetbrains.kotlinx:kotlinx-coroutines-core:1.8.1")
}

// Build libtern.so for the app ABIs with cargo-ndk (build-native.sh: needs ANDROID_NDK_HOME,
// `cargo install cargo-ndk` and the Rust Android targets). Run it before assembling:
//   ./gradlew cargoNdk assembleRelease
// Not run by tern's authors or CI (no Android SDK/NDK there): see docs/app-developers.md.
val cargoNdk by tasks.registering(Exec::class) {
    group = "build"
    description = "Builds libtern.so for arm64-v8a, armeabi-v7a and x86_64 with cargo-ndk."
    workingDir = rootDir
    commandLine("bash", "build-native.sh")
}
