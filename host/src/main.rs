fn main() -> anyhow::Result<()> {
    anyhow::bail!("the controller entry point is not wired yet")
}
